//! HDF5 files written by the tests themselves (no binary fixtures), and a
//! walker that describes a file completely, to compare a remote read with a
//! local one (feature `hdf5`).

use std::path::{Path, PathBuf};

use remfile::hdf5::hdf5_metno::types::{
    FloatSize, IntSize, TypeDescriptor, VarLenAscii, VarLenUnicode,
};
use remfile::hdf5::hdf5_metno::{self as h5lib, Attribute, Dataset, Group, H5Type};
use remfile::hdf5::ndarray;
use remfile::hdf5::{self as h5};

#[doc(inline)]
pub use crate::temp_path;

/// A path for a generated file, unique to this process: under cargo's
/// temporary directory for tests (`target/tmp`) when the code that expands
/// it is an integration test or a benchmark, else under the system's
/// temporary directory. Files that earlier, finished runs left under the
/// same name are removed. `temp_path!(name)` is
/// [`temp_path_in`]`(option_env!("CARGO_TARGET_TMPDIR"), name)`, the
/// variable read where the macro is expanded (cargo sets it only when it
/// builds integration tests and benchmarks).
#[macro_export]
macro_rules! temp_path {
    ($name:expr) => {
        $crate::h5files::temp_path_in(::std::option_env!("CARGO_TARGET_TMPDIR"), $name)
    };
}

/// A path for a generated file, unique to this process, under `tmpdir`
/// (cargo's temporary directory for tests) if given, else under the
/// system's temporary directory: what [`temp_path!`] gives.
pub fn temp_path_in(tmpdir: Option<&str>, name: &str) -> PathBuf {
    let dir = tmpdir.map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let prefix = format!("remfile-{name}-");
    // Where /proc tells which processes live (Linux), files of dead ones go.
    let proc = Path::new("/proc");
    if let (true, Ok(entries)) = (proc.join("self").exists(), std::fs::read_dir(&dir)) {
        for e in entries.flatten() {
            let file_name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = file_name.strip_prefix(&prefix) {
                if !proc.join(pid).exists() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
    crate::per_process(&dir, &prefix)
}

fn vlu(s: &str) -> VarLenUnicode {
    s.parse().expect("valid string")
}

fn str_attr(loc: &h5lib::Location, name: &str, value: &str) -> h5lib::Result<()> {
    loc.new_attr::<VarLenUnicode>()
        .create(name)?
        .write_scalar(&vlu(value))
}

/// Nested groups, many attributes of several types, a contiguous dataset, a
/// chunked dataset with deflate and shuffle, a variable-length string dataset.
pub fn write_rich(path: &Path) -> h5lib::Result<()> {
    let file = h5::File::create(path)?;
    str_attr(&file, "title", "a file with a little of everything")?;
    file.new_attr::<i64>().create("version")?.write_scalar(&3)?;
    let mut g = file.create_group("a")?;
    for depth in 0..5 {
        g.new_attr::<f64>()
            .create("depth")?
            .write_scalar(&(depth as f64 * 0.5))?;
        str_attr(&g, "note", &format!("level {depth}: ünïcødé ✓"))?;
        g = g.create_group(&format!("level{depth}"))?;
    }
    let attrs = file.create_group("attributes")?;
    for i in 0..40 {
        attrs
            .new_attr::<i32>()
            .create(format!("int{i}").as_str())?
            .write_scalar(&(i * 7))?;
        str_attr(&attrs, &format!("str{i}"), &"x".repeat(i as usize))?;
    }
    attrs
        .new_attr::<u16>()
        .shape(5)
        .create("array")?
        .write_raw(&[1u16, 2, 3, 4, 5])?;
    attrs
        .new_attr::<VarLenAscii>()
        .create("ascii")?
        .write_scalar(&VarLenAscii::from_ascii("plain").unwrap())?;

    let contiguous: Vec<f64> = (0..200_000).map(|i| (i as f64).sin()).collect();
    let ds = file
        .new_dataset::<f64>()
        .shape(contiguous.len())
        .create("contiguous")?;
    ds.write_raw(&contiguous)?;
    str_attr(&ds, "units", "volts")?;

    let chunked: Vec<i32> = (0..400 * 300).map(|i| (i % 977) * (i % 13) - 500).collect();
    let ds = file
        .new_dataset::<i32>()
        .shape((400, 300))
        .chunk((50, 75))
        .shuffle()
        .deflate(4)
        .create("chunked")?;
    ds.write_raw(&chunked)?;

    let strings: Vec<VarLenUnicode> = (0..500)
        .map(|i| vlu(&format!("row {i}: {}", "é".repeat(i % 17))))
        .collect();
    let ds = file
        .new_dataset::<VarLenUnicode>()
        .shape(strings.len())
        .create("strings")?;
    ds.write_raw(&strings)?;
    Ok(())
}

/// Rows of the NWB-like file's `ElectricalSeries/data`.
pub const NWB_ROWS: usize = 300_000;
/// Columns of the NWB-like file's `ElectricalSeries/data`.
pub const NWB_COLS: usize = 64;
/// Rows per chunk: 16384 x 64 x 2 bytes = 2 MiB chunks.
pub const NWB_CHUNK_ROWS: usize = 16_384;

/// The value at (row, col) of the NWB-like data.
pub fn nwb_value(row: usize, col: usize) -> i16 {
    // A slowly varying signal plus a little noise: compresses like recordings do.
    let base = ((row / 4) * 31 + col * 1009) % 8191;
    let noise = (row * 7 + col * 13) % 4;
    (base + noise) as i16 - 4096
}

/// The shape of an NWB-like file.
#[derive(Debug, Clone, Copy)]
pub struct NwbShape {
    /// Rows of `ElectricalSeries/data` (64 int16 columns each).
    pub rows: usize,
    /// Rows per chunk.
    pub chunk_rows: usize,
    /// gzip level of the data, if compressed.
    pub deflate: Option<u8>,
    /// Extra processing groups, each with 3 datasets and 12 attributes.
    pub extra_groups: usize,
    /// The file format's structures.
    pub format: Format,
}

/// Which HDF5 file format a test file is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// What the linked library writes by default (the earliest format up
    /// to 1.14, that of 1.8 from 2.0 on).
    Default,
    /// The earliest format, as h5py and pynwb write by default: symbol
    /// table groups, version 1 object headers and B-trees.
    Earliest,
    /// The latest: version 2 object headers and B-trees, dense link and
    /// attribute storage in fractal heaps, newer chunk indexes.
    Latest,
}

impl NwbShape {
    /// The test suite's file: 300,000 rows (about 38 MB), uncompressed.
    pub const TEST: NwbShape = NwbShape {
        rows: NWB_ROWS,
        chunk_rows: NWB_CHUNK_ROWS,
        deflate: None,
        extra_groups: 0,
        format: Format::Default,
    };
}

/// An NWB-like layout: a large chunked int16 `acquisition/ElectricalSeries/data`
/// written first, then most object headers (units, trials, processing,
/// general metadata) after the bulk data, as NWB writers do.
pub fn write_nwb_like(path: &Path) -> h5lib::Result<()> {
    write_nwb(path, NwbShape::TEST)
}

/// [`write_nwb_like`] in any shape.
pub fn write_nwb(path: &Path, shape: NwbShape) -> h5lib::Result<()> {
    let file = h5::File::with_options()
        .with_fapl(|fapl| match shape.format {
            Format::Default => fapl,
            Format::Earliest => fapl.libver_earliest(),
            Format::Latest => fapl.libver_latest(),
        })
        .create(path)?;
    let acq = file.create_group("acquisition")?;
    let es = acq.create_group("ElectricalSeries")?;
    let mut builder = es
        .new_dataset::<i16>()
        .shape((shape.rows, NWB_COLS))
        .chunk((shape.chunk_rows, NWB_COLS));
    if let Some(level) = shape.deflate {
        builder = builder.deflate(level);
    }
    let data = builder.create("data")?;
    // Written in slabs of whole chunks, to bound memory for large files.
    let slab_rows = shape.chunk_rows * 16;
    for start in (0..shape.rows).step_by(slab_rows) {
        let end = (start + slab_rows).min(shape.rows);
        let slab: Vec<i16> = (start * NWB_COLS..end * NWB_COLS)
            .map(|i| nwb_value(i / NWB_COLS, i % NWB_COLS))
            .collect();
        let slab = ndarray::Array2::from_shape_vec((end - start, NWB_COLS), slab).unwrap();
        data.write_slice(&slab, (start..end, ..))?;
    }
    // Everything below lands after the bulk data.
    for (name, value) in [
        ("neurodata_type", "ElectricalSeries"),
        ("namespace", "core"),
        ("object_id", "5f1e0a6c-9d43-4b0e-8f6e-2b0c3a9d1e77"),
        ("description", "raw voltage traces"),
    ] {
        str_attr(&es, name, value)?;
    }
    es.new_attr::<f64>()
        .create("rate")?
        .write_scalar(&30_000.0)?;
    es.new_dataset::<f64>()
        .shape(1)
        .create("starting_time")?
        .write_raw(&[0.0f64])?;
    let electrodes: Vec<i64> = (0..NWB_COLS as i64).collect();
    es.new_dataset::<i64>()
        .shape(NWB_COLS)
        .create("electrodes")?
        .write_raw(&electrodes)?;

    let units = file.create_group("units")?;
    str_attr(&units, "neurodata_type", "Units")?;
    str_attr(&units, "colnames", "spike_times")?;
    let spike_times: Vec<f64> = (0..20_000).map(|i| i as f64 * 0.0137).collect();
    let index: Vec<u64> = (1..=40).map(|i| i * 500).collect();
    units
        .new_dataset::<f64>()
        .shape(spike_times.len())
        .create("spike_times")?
        .write_raw(&spike_times)?;
    units
        .new_dataset::<u64>()
        .shape(index.len())
        .create("spike_times_index")?
        .write_raw(&index)?;
    units
        .new_dataset::<i64>()
        .shape(40)
        .create("id")?
        .write_raw(&(0..40i64).collect::<Vec<_>>())?;

    let intervals = file.create_group("intervals")?;
    let trials = intervals.create_group("trials")?;
    str_attr(&trials, "neurodata_type", "TimeIntervals")?;
    str_attr(&trials, "colnames", "start_time stop_time")?;
    let starts: Vec<f64> = (0..300).map(|i| i as f64 * 2.0).collect();
    let stops: Vec<f64> = starts.iter().map(|s| s + 1.5).collect();
    for (name, values) in [("start_time", &starts), ("stop_time", &stops)] {
        let ds = trials
            .new_dataset::<f64>()
            .shape(values.len())
            .create(name)?;
        ds.write_raw(values)?;
        str_attr(&ds, "description", name)?;
    }
    trials
        .new_dataset::<i64>()
        .shape(300)
        .create("id")?
        .write_raw(&(0..300i64).collect::<Vec<_>>())?;

    let general = file.create_group("general")?;
    // More attributes than an object header keeps compact (8): in the latest
    // format they go to dense storage, a fractal heap and a name index.
    for i in 0..12 {
        str_attr(
            &general,
            &format!("note{i:02}"),
            &format!("session note {i}"),
        )?;
    }
    for i in 0..20 {
        let g = general.create_group(&format!("device{i}"))?;
        str_attr(&g, "description", &format!("probe {i}"))?;
        str_attr(&g, "manufacturer", "acme")?;
    }
    let processing = file.create_group("processing")?;
    for name in ["behavior", "ecephys"] {
        let g = processing.create_group(name)?;
        str_attr(&g, "neurodata_type", "ProcessingModule")?;
    }
    for i in 0..shape.extra_groups {
        let g = processing.create_group(&format!("module{i:03}"))?;
        for a in 0..6 {
            str_attr(&g, &format!("attr{a}"), &format!("value {i}.{a}"))?;
        }
        for d in 0..3 {
            let ds = g
                .new_dataset::<f64>()
                .shape(100 + d * 50)
                .create(format!("series{d}").as_str())?;
            ds.write_raw(
                &(0..100 + d * 50)
                    .map(|v| v as f64 / 7.0)
                    .collect::<Vec<_>>(),
            )?;
            str_attr(&ds, "unit", "seconds")?;
            ds.new_attr::<f64>()
                .create("conversion")?
                .write_scalar(&1.0)?;
        }
    }
    str_attr(&file, "nwb_version", "2.7.0")?;
    str_attr(&file, "identifier", "test-session")?;
    Ok(())
}

/// Rows each step of [`write_appended`] adds to each series (one chunk's).
pub const APPEND_ROWS: usize = 64;
/// The columns of [`write_appended`]'s series.
pub const APPEND_COLS: usize = 64;

/// A file of the latest format laid out as netCDF-4 and logger files are:
/// its groups, variables and attributes defined first, then its data
/// appended in `steps` steps of one chunk per variable. Three series grow
/// along one unlimited dimension (extensible array chunk indexes, one
/// deflated), a grid along two (a version 2 B-tree of chunks), and a table
/// of fixed size is filled a few chunks a step (a fixed array of 2,048
/// chunks, in two pages). The writer allocates each index's blocks and
/// nodes as their chunks come, so they lie among the data. The groups keep
/// their links and attributes in dense storage (fractal heaps, name and
/// creation-order indexes).
pub fn write_appended(path: &Path, steps: usize) -> h5lib::Result<()> {
    use h5lib::plist::file_create::{AttrCreationOrder, LinkCreationOrder};
    let file = h5::File::with_options()
        .with_fapl(|fapl| fapl.libver_latest())
        .with_fcpl(|fcpl| fcpl.link_creation_order(LinkCreationOrder::Indexed))
        .create(path)?;
    let dense = |parent: &Group, name: &str| {
        parent
            .create_group_builder()
            .with_gcpl(|gcpl| {
                gcpl.link_creation_order(LinkCreationOrder::Indexed)
                    .attr_creation_order(AttrCreationOrder::Indexed)
            })
            .create(name)
    };
    let series = dense(&file, "series")?;
    let mut appended = Vec::new();
    for (i, name) in ["voltage", "current", "temperature"].iter().enumerate() {
        let mut builder = series
            .new_dataset::<i16>()
            .chunk((APPEND_ROWS, APPEND_COLS))
            .shape((0.., APPEND_COLS));
        if i == 2 {
            builder = builder.deflate(4);
        }
        appended.push(builder.create(*name)?);
    }
    let grid = series
        .new_dataset::<i16>()
        .chunk((32, 32))
        .shape((0.., 0..))
        .create("grid")?;
    let (table_rows, table_chunk) = (2048 * 8, 8);
    let table = series
        .new_dataset::<i16>()
        .chunk((table_chunk, 8))
        .shape((table_rows, 8))
        .create("table")?;
    for ds in appended.iter().chain([&grid, &table]) {
        for a in 0..12 {
            str_attr(ds, &format!("attr{a:02}"), &format!("value {a}"))?;
        }
    }
    // A group of many members (its links in a fractal heap of several
    // blocks, under an indirect block), each member's attributes dense.
    let events = dense(&file, "events")?;
    for e in 0..100 {
        let event = dense(&events, &format!("event{e:03}"))?;
        for a in 0..10 {
            str_attr(&event, &format!("note{a}"), &format!("event {e}, note {a}"))?;
        }
    }
    str_attr(&file, "title", "appended step by step")?;
    let per_step = table_rows.div_ceil(steps.max(1));
    for step in 0..steps {
        let rows = step * APPEND_ROWS..(step + 1) * APPEND_ROWS;
        for (i, ds) in appended.iter().enumerate() {
            ds.resize((rows.end, APPEND_COLS))?;
            let slab = ndarray::Array2::from_shape_fn((APPEND_ROWS, APPEND_COLS), |(r, c)| {
                nwb_value(rows.start + r, c + i)
            });
            ds.write_slice(&slab, (rows.clone(), ..))?;
        }
        // One more row of chunks, two columns of them.
        grid.resize(((step + 1) * 32, 64))?;
        let slab = ndarray::Array2::from_shape_fn((32, 64), |(r, c)| nwb_value(step * 32 + r, c));
        grid.write_slice(&slab, (step * 32..(step + 1) * 32, ..))?;
        let filled = (step * per_step).min(table_rows)..((step + 1) * per_step).min(table_rows);
        if !filled.is_empty() {
            let slab = ndarray::Array2::from_shape_fn((filled.len(), 8), |(r, c)| {
                nwb_value(filled.start + r, c)
            });
            table.write_slice(&slab, (filled, ..))?;
        }
    }
    Ok(())
}

/// Describes every group, dataset and attribute with all values (large data
/// as a checksum), in a stable order.
pub fn describe(file: &h5::File) -> h5lib::Result<Vec<String>> {
    let mut out = Vec::new();
    describe_group(file, "/", &mut out)?;
    Ok(out)
}

fn describe_group(g: &Group, path: &str, out: &mut Vec<String>) -> h5lib::Result<()> {
    out.push(format!("group {path}"));
    describe_attrs(g, path, out)?;
    let mut names = g.member_names()?;
    names.sort();
    for name in names {
        let child = format!("{}/{name}", path.trim_end_matches('/'));
        if let Ok(sub) = g.group(&name) {
            describe_group(&sub, &child, out)?;
        } else {
            let ds = g.dataset(&name)?;
            describe_dataset(&ds, &child, out)?;
        }
    }
    Ok(())
}

fn describe_attrs(loc: &h5lib::Location, path: &str, out: &mut Vec<String>) -> h5lib::Result<()> {
    let mut names = loc.attr_names()?;
    names.sort();
    for name in names {
        let a: Attribute = loc.attr(&name)?;
        let value = values(&a)?;
        out.push(format!("attr {path}@{name} {:?} = {value}", a.shape()));
    }
    Ok(())
}

fn describe_dataset(ds: &Dataset, path: &str, out: &mut Vec<String>) -> h5lib::Result<()> {
    let value = values(ds)?;
    out.push(format!(
        "dataset {path} {:?} chunks {:?} filters {:?} = {value}",
        ds.shape(),
        ds.chunk(),
        ds.filters().len()
    ));
    describe_attrs(ds, path, out)
}

fn values(c: &h5lib::Container) -> h5lib::Result<String> {
    fn show<T: H5Type + std::fmt::Debug>(c: &h5lib::Container) -> h5lib::Result<String> {
        let v: Vec<T> = c.read_raw()?;
        let text = format!("{v:?}");
        Ok(if text.len() > 200 {
            format!(
                "{} values, checksum {:016x}",
                v.len(),
                checksum(text.as_bytes())
            )
        } else {
            text
        })
    }
    let desc = c.dtype()?.to_descriptor()?;
    match desc {
        TypeDescriptor::Integer(IntSize::U1) => show::<i8>(c),
        TypeDescriptor::Integer(IntSize::U2) => show::<i16>(c),
        TypeDescriptor::Integer(IntSize::U4) => show::<i32>(c),
        TypeDescriptor::Integer(IntSize::U8) => show::<i64>(c),
        TypeDescriptor::Unsigned(IntSize::U1) => show::<u8>(c),
        TypeDescriptor::Unsigned(IntSize::U2) => show::<u16>(c),
        TypeDescriptor::Unsigned(IntSize::U4) => show::<u32>(c),
        TypeDescriptor::Unsigned(IntSize::U8) => show::<u64>(c),
        TypeDescriptor::Float(FloatSize::U4) => show::<f32>(c),
        TypeDescriptor::Float(FloatSize::U8) => show::<f64>(c),
        TypeDescriptor::VarLenUnicode => show::<VarLenUnicode>(c),
        TypeDescriptor::VarLenAscii => show::<VarLenAscii>(c),
        other => Ok(format!("<{other}>")),
    }
}

/// FNV-1a, enough to tell two large values apart.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Visits every group and dataset and reads every attribute, but no dataset
/// data: what opening a file in a viewer costs. Returns the objects visited.
pub fn walk_metadata(g: &Group) -> h5lib::Result<usize> {
    let mut visited = 1;
    for name in g.attr_names()? {
        let a = g.attr(&name)?;
        values(&a)?;
    }
    for name in g.member_names()? {
        if let Ok(sub) = g.group(&name) {
            visited += walk_metadata(&sub)?;
        } else {
            let ds = g.dataset(&name)?;
            let _ = (ds.shape(), ds.dtype()?, ds.chunk());
            for attr in ds.attr_names()? {
                let a = ds.attr(&attr)?;
                values(&a)?;
            }
            visited += 1;
        }
    }
    Ok(visited)
}

/// As [`walk_metadata`], and as users' tools walk (h5py's `visititems`
/// asking for each object's info): each object's info, and for a chunked
/// dataset its number of chunks, which makes HDF5 read every node of its
/// chunk index. Returns the objects visited.
pub fn walk_all_info(g: &Group) -> h5lib::Result<usize> {
    let mut visited = 1;
    g.loc_info()?;
    // A value of a type the walk cannot show (a reference, a compound) is
    // still read as far as HDF5 reads it to open the attribute.
    for name in g.attr_names()? {
        let a = g.attr(&name)?;
        let _ = values(&a);
    }
    for name in g.member_names()? {
        if let Ok(sub) = g.group(&name) {
            visited += walk_all_info(&sub)?;
        } else if let Ok(ds) = g.dataset(&name) {
            ds.loc_info()?;
            let _ = (ds.shape(), ds.dtype()?, ds.chunk(), ds.filters());
            if ds.is_chunked() {
                let _ = ds.num_chunks();
            }
            for attr in ds.attr_names()? {
                let a = ds.attr(&attr)?;
                let _ = values(&a);
            }
            visited += 1;
        }
    }
    Ok(visited)
}

/// The chunked dataset of `file` with the most elements whose elements are
/// 1, 2, 4 or 8 bytes wide (numbers), by path.
pub fn largest_chunked(file: &h5::File) -> Option<(String, Dataset)> {
    let mut best: Option<(usize, String, Dataset)> = None;
    let mut stack = vec![("/".to_owned(), file.as_group().ok()?)];
    while let Some((path, group)) = stack.pop() {
        for name in group.member_names().ok()? {
            let child = format!("{}/{name}", path.trim_end_matches('/'));
            if let Ok(g) = group.group(&name) {
                stack.push((child, g));
            } else if let Ok(ds) = group.dataset(&name) {
                let numeric = ds.dtype().is_ok_and(|t| matches!(t.size(), 1 | 2 | 4 | 8));
                let size = ds.size();
                if ds.chunk().is_some()
                    && numeric
                    && size > 0
                    && best.as_ref().is_none_or(|b| size > b.0)
                {
                    best = Some((size, child, ds));
                }
            }
        }
    }
    best.map(|(_, path, ds)| (path, ds))
}

/// The raw little-endian bytes of the selection `ranges` of `ds` (one range
/// per dimension), whatever its element type of 1, 2, 4 or 8 bytes (read as
/// unsigned integers of that width; HDF5 converts, the bytes are the same).
pub fn read_selection_bytes(ds: &Dataset, ranges: &[std::ops::Range<usize>]) -> Vec<u8> {
    use remfile::hdf5::hdf5_metno::Hyperslab;
    fn read<T: H5Type, const N: usize>(
        ds: &Dataset,
        slab: Hyperslab,
        bytes: fn(T) -> [u8; N],
    ) -> Vec<u8> {
        let values = ds.read_slice::<T, _, ndarray::IxDyn>(slab).unwrap();
        values
            .into_raw_vec_and_offset()
            .0
            .into_iter()
            .flat_map(bytes)
            .collect()
    }
    let slab: Hyperslab = ranges
        .iter()
        .map(|r| r.clone().into())
        .collect::<Vec<_>>()
        .into();
    match ds.dtype().unwrap().size() {
        1 => read(ds, slab, u8::to_le_bytes),
        2 => read(ds, slab, u16::to_le_bytes),
        4 => read(ds, slab, u32::to_le_bytes),
        _ => read(ds, slab, u64::to_le_bytes),
    }
}
