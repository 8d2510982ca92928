"""``explain``: an HDF5 file's open and walk, round by round; its rounds and
requests are the server's, and it says what each round brought."""

import json
import subprocess
import sys
import urllib.request

import pytest

import remfile_hdf5


def server_rounds(server, mark):
    """Rounds of the requests the server answered since ``mark``: those
    that came before any answer of the current round was written belong
    to it (as the benchmarks count them)."""
    with urllib.request.urlopen(f"{server.base}/__times", timeout=30) as r:
        times = sorted(t for t in json.loads(r.read())[mark:] if t)
    count, first_answer = 0, float("-inf")
    for came, answered in times:
        if count == 0 or came >= first_answer:
            count, first_answer = count + 1, answered
        else:
            first_answer = min(first_answer, answered)
    return count


@pytest.mark.parametrize("name", ["session.nwb", "data.h5"])
def test_its_rounds_and_requests_are_the_servers(slow_server, name):
    # Every file afresh (an explain opens its own), each answer 400 ms late.
    mark = slow_server.mark()
    account = remfile_hdf5.explain(slow_server.url(name), cache_capacity="32MiB")
    requests = slow_server.requests_since(mark)
    listed = [r for rnd in account["rounds"] for r in rnd["requests"]]
    assert sorted(r["range"] for r in listed) == sorted(r[2].removeprefix("bytes=") for r in requests)
    assert len(account["rounds"]) == server_rounds(slow_server, mark), account["text"]
    first = account["rounds"][0]
    assert "superblock" in first["brought"] and "object headers" in first["brought"]
    assert account["metadata_read"] > 0 and account["metadata_rounds"] >= 1
    assert "round   1" in account["text"] and "total" in account["text"]


def test_the_command_prints_it_without_the_query(server):
    out = subprocess.run([sys.executable, "-m", "remfile_hdf5", "explain", server.url("session.nwb")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(server.base + "/session.nwb\n"), out.stdout
    assert "secret" not in out.stdout and "round   1" in out.stdout and "advice" in out.stdout
    as_json = subprocess.run([sys.executable, "-m", "remfile_hdf5", "explain", "--json",
                              server.url("data.h5")], capture_output=True, text=True, timeout=120)
    assert json.loads(as_json.stdout)["rounds"][0]["requests"], as_json.stderr


def test_a_file_object_refuses_trace(server):
    with pytest.raises(ValueError, match="trace"):
        remfile_hdf5.RemoteFile(server.url("data.h5"), trace=True)
