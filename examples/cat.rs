//! Writes (part of) a remote file to standard output.
//!
//! ```text
//! cargo run --example cat -- URL [--offset N] [--length N]
//! cargo run --example cat -- --offset 100 --length 200   # a generated local file
//! ```
//!
//! Without a URL, a generated text file is served from 127.0.0.1, so it runs
//! with no network. A negative offset counts from the end of the file.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::process::ExitCode;

use remfile::RemoteFile;

struct Args {
    url: Option<String>,
    offset: i64,
    length: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        url: None,
        offset: 0,
        length: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--offset" => {
                let v = value("--offset")?;
                args.offset = v.parse().map_err(|_| format!("bad offset {v:?}"))?;
            }
            "--length" => {
                let v = value("--length")?;
                args.length = Some(v.parse().map_err(|_| format!("bad length {v:?}"))?);
            }
            "-h" | "--help" => return Err(String::new()),
            url if args.url.is_none() && !url.starts_with('-') => args.url = Some(url.to_owned()),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("cat: {e}");
            }
            eprintln!("usage: cat [URL] [--offset N] [--length N]");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        // `cat … | head` closes the pipe early: that is not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cat: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> io::Result<()> {
    let server;
    let builder = RemoteFile::builder().proxy_from_env(args.url.is_some());
    let url = match args.url {
        Some(url) => url,
        None => {
            let text: String = (1..=10_000).map(|i| format!("line {i}\n")).collect();
            server = remfile_testkit::RangeServer::new(text.into_bytes());
            server.url("/lines.txt")
        }
    };
    let mut file = builder.open(&url)?;
    if args.offset >= 0 {
        file.seek(SeekFrom::Start(args.offset as u64))?;
    } else {
        file.seek(SeekFrom::End(args.offset))?;
    }
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match args.length {
        Some(n) => io::copy(&mut file.by_ref().take(n), &mut out)?,
        None => io::copy(&mut file, &mut out)?,
    };
    out.flush()
}
