"""The executable errata table: each printed equation fails its check, each correction passes."""

from validation.errata import ERRATA, run_errata


def test_every_printed_form_fails_and_every_correction_passes():
    table = run_errata()
    assert len(table) == len(ERRATA) >= 7
    assert (~table.printed_passes).all(), table[table.printed_passes]
    assert table.corrected_passes.all(), table[~table.corrected_passes]
    assert table.ok.all()
