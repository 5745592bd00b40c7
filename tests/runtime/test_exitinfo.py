"""Exit kinds from scx_layered's output (fast tier)."""

from __future__ import annotations

import signal

from threadwise.runtime.exitinfo import classify, error_chain


def test_clean_unregister():
    out = "\x1b[32m INFO\x1b[0m attached\nEXIT: unregistered from user space\n"
    report = classify(out, 0, attached=True)
    assert report.kind == "unreg"
    assert report.clean
    assert report.message == "EXIT: unregistered from user space"


def test_stall_with_message_and_cpu():
    # error kinds are not printed by report() but bailed: anyhow's "Error: EXIT: ..."
    out = (
        "DEBUG DUMP\n...\n"
        "Error: EXIT: runnable task stall (kworker/1:2[123] failed to run for 30.1s) on CPU 1\n"
    )
    report = classify(out, 1, attached=True)
    assert report.kind == "error_stall"
    assert "failed to run" in report.message
    assert report.message.endswith("on CPU 1")
    assert not report.clean


def test_sysrq_and_bpf_error():
    assert classify("EXIT: disabled by sysrq-S\n", 1, attached=True).kind == "sysrq"
    assert classify("EXIT: scx_bpf_error (oops)\n", 1, attached=True).kind == "error_bpf"


def test_killed_without_exit_line():
    report = classify("INFO attached\n", -signal.SIGKILL, attached=True)
    assert report.kind == "killed"
    assert "SIGKILL" in report.describe()


def test_load_failure_uses_error_chain():
    out = 'INFO loading\nError: Terminal spec "rest" must have an empty match\n'
    report = classify(out, 1, attached=False)
    assert report.kind == "load_failure"
    assert report.message == 'Terminal spec "rest" must have an empty match'


def test_error_chain_with_causes():
    out = "Error: failed to load BPF\n\nCaused by:\n    0: failed to open system Kconfig\n    1: EINVAL\n"
    assert error_chain(out) == "failed to load BPF; failed to open system Kconfig; EINVAL"


def test_crash_after_attach_without_exit_line():
    assert classify("panicked at ...", 101, attached=True).kind == "crashed"
