"""Which failed boots of the vng lab are tried again (runtime/lab/vng.py `retry_reason`): only a
known failure of the emulation, or vng's failure before the guest ran the command; never a boot
whose command had started (its side effects may be done)."""

from __future__ import annotations

from threadwise.runtime.lab.vng import TCG_PATCHING_OOPS, retry_reason

CUT_MID_BOOT = "[    1.830804] pci 0000:00:05.0: [1af4:1003] type 00 class 0x078000 conventional PCI endpoint"


def test_a_boot_that_died_before_the_guest_came_up_is_tried_again() -> None:
    assert retry_reason(CUT_MID_BOOT, 255, came_up=False) == "vng exited 255 before the guest came up"


def test_a_boot_whose_command_started_is_not() -> None:
    assert retry_reason(CUT_MID_BOOT, 255, came_up=True) is None
    assert retry_reason(CUT_MID_BOOT, 0, came_up=False) is None


def test_a_known_emulation_failure_is_tried_again_wherever_it_happened() -> None:
    assert retry_reason(f"... {TCG_PATCHING_OOPS} ...", 1, came_up=True) == repr(TCG_PATCHING_OOPS)
