"""Nothing phones home: one console question under a fresh HOME leaves no telemetry and reaches no one.

The console runs as a child process with an empty HOME, answering one question about the demo chat.
Two witnesses watch it:
- a ``sitecustomize`` in the child records every Python socket connection and name lookup that is not
  to this machine (loopback or a Unix socket);
- where ``strace`` is installed, the kernel's view of every ``connect`` the process tree makes, which
  also sees native code (onnxruntime's telemetry client is C++, not Python).
Afterwards nothing may have been written where onnxruntime keeps its device id and event queue
(``~/.cache/Microsoft/DeveloperTools/.onnxruntime``), and neither witness may have seen a connection out.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HOOK = r'''
import ipaddress, json, os, socket

_LOG = os.environ["CHORUS_NET_LOG"]


def _note(kind, what):
    with open(_LOG, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"kind": kind, "what": str(what)}) + "\n")


def _outside(address):
    host = address[0] if isinstance(address, tuple) else None
    if host is None:
        return False  # a Unix socket
    if host in ("localhost", ""):
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a host name: a lookup that leaves the machine


_connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo


def connect(self, address):
    if _outside(address):
        _note("connect", address)
    return _connect(self, address)


def connect_ex(self, address):
    if _outside(address):
        _note("connect", address)
    return _connect_ex(self, address)


def getaddrinfo(host, *args, **kwargs):
    if host is not None and _outside((host if isinstance(host, str) else host.decode(), 0)):
        _note("lookup", host)
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
'''
_INET = re.compile(r'connect\(\d+, \{sa_family=AF_INET6?, [^}]*?(?:sin_addr=inet_addr\("([^"]+)"\)|'
                   r'inet_pton\(AF_INET6, "([^"]+)")')


def outside_connects(strace_log: str) -> list[str]:
    """Addresses in an ``strace -e connect`` log that are not loopback (or the unspecified address)."""
    found = []
    for line in strace_log.splitlines():
        m = _INET.search(line)
        if m:
            addr = m.group(1) or m.group(2)
            if not (addr.startswith("127.") or addr in ("::1", "0.0.0.0", "::")):
                found.append(addr)
    return found


def test_outside_connects_reads_strace_lines():
    log = ('12 connect(3, {sa_family=AF_INET, sin_port=htons(443), sin_addr=inet_addr("20.42.65.92")}, 16) = -1\n'
           '12 connect(4, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("127.0.0.1")}, 16) = 0\n'
           '12 connect(5, {sa_family=AF_INET6, sin6_port=htons(53), sin6_flowinfo=htonl(0), '
           'inet_pton(AF_INET6, "2001:db8::1", &sin6_addr), sin6_scope_id=0}, 28) = 0\n'
           '12 connect(6, {sa_family=AF_UNIX, sun_path="/run/x"}, 110) = 0\n')
    assert outside_connects(log) == ["20.42.65.92", "2001:db8::1"]


@pytest.mark.slow
def test_one_console_question_under_a_fresh_home_phones_nobody(tmp_path):
    home, hook = tmp_path / "home", tmp_path / "hook"
    home.mkdir()
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    net_log = tmp_path / "net.jsonl"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XDG_", "CHORUS_", "ORT_", "HF_", "DO_NOT_TRACK", "TRANSFORMERS_"))}
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join([str(hook), str(ROOT)]), CHORUS_NET_LOG=str(net_log))
    command = [sys.executable, "-m", "bot", "console"]
    trace = tmp_path / "strace.txt"
    strace = shutil.which("strace")
    if strace:
        # --seccomp-bpf (strace 5.3+) stops the child only at connect(), not at every system call: 85 s -> 16 s.
        fast = ["--seccomp-bpf"] if "seccomp-bpf" in subprocess.run([strace, "-h"], capture_output=True,
                                                                    text=True).stdout else []
        command = [strace, "-f", "-qq", *fast, "-e", "trace=connect", "-e", "signal=none", "-o", str(trace),
                   *command]
    done = subprocess.run(command, input="@chorus where are we having dinner?\n/quit\n", capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pizza" in done.stdout.casefold(), done.stdout  # it really answered from the demo chat

    microsoft = home / ".cache" / "Microsoft"
    assert not microsoft.exists(), sorted(str(p.relative_to(home)) for p in microsoft.rglob("*"))
    assert not [p for p in home.rglob("*") if "deviceid" in p.name.casefold()]
    calls = [json.loads(line) for line in net_log.read_text().splitlines()] if net_log.exists() else []
    assert calls == [], calls
    if strace:
        assert outside_connects(trace.read_text(errors="replace")) == []
