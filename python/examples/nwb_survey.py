"""A survey of NWB sessions: each one's subject, devices and tables, from a list
of URLs, with every file's metadata fetched at once.

    python nwb_survey.py URL [URL ...] [--disk-cache DIR] [--immutable]
    python nwb_survey.py --urls FILE            # one URL per line

``remfile_hdf5.prefetch_files`` opens the files and fetches their metadata side
by side, ahead of the loop below; each ``h5py.File(url, driver="remfile")``
then takes its file, opened, and pynwb reads its metadata from memory. Opened
one after another without it, the survey would cost each file's round trips
in turn. A file that fails (a wrong URL, an expired signature) is reported
at its own open and the survey goes on.

With ``--disk-cache``, a second run reads the metadata from disk, and with
``--immutable`` (objects at these URLs never change, as DANDI's blobs do) it
sends no request at all.
"""

import argparse
import sys

import h5py
import pynwb

import remfile_hdf5


def describe(url, options):
    """One session's summary, read through pynwb."""
    with h5py.File(url, "r", driver="remfile", **options) as f:
        with pynwb.NWBHDF5IO(file=f, mode="r", load_namespaces=True) as io:
            nwb = io.read()
            subject = nwb.subject
            return {
                "session": nwb.session_description,
                "subject": subject.subject_id if subject is not None else None,
                "species": getattr(subject, "species", None),
                "devices": sorted(nwb.devices),
                "acquisition": sorted(nwb.acquisition),
                "units": list(nwb.units.colnames) if nwb.units is not None else [],
            }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="*")
    parser.add_argument("--urls", dest="url_file", help="a file of URLs, one per line")
    parser.add_argument("--disk-cache", help="a directory for the disk cache")
    parser.add_argument("--immutable", action="store_true",
                        help="the objects at these URLs never change")
    args = parser.parse_args()
    urls = list(args.urls)
    if args.url_file:
        with open(args.url_file) as lines:
            urls += [line.strip() for line in lines if line.strip()]
    if not urls:
        parser.error("no URL given")
    options = {}
    if args.disk_cache:
        options["disk_cache"] = args.disk_cache
    if args.immutable:
        options["immutable"] = True

    # In the background: the loop starts at once and opens each file as soon
    # as its metadata is in.
    with remfile_hdf5.prefetch_files(urls, **options) as ahead:
        for url in urls:
            shown = url.split("?")[0]
            try:
                print(shown, describe(url, options), flush=True)
            except Exception as e:  # noqa: BLE001  (one session's failure ends no survey)
                print(shown, "failed:", e, file=sys.stderr, flush=True)
        print(f"{len(urls)} files; the batch: {ahead.progress}", file=sys.stderr)


if __name__ == "__main__":
    main()
