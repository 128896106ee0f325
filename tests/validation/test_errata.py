"""The executable errata table: each printed equation fails its check, each correction passes.

HPF's rows (seed 001: CAVI in `validation.models.hpf`, complete conditionals in `validation.models.hpf_gibbs`) are
run here; the other models' rows by their own test files; `test_registry.py` checks that the
registry collects every model's rows.
"""

from validation.models import hpf, hpf_gibbs
from validation.checks.errata import run_errata


def test_every_printed_form_fails_and_every_correction_passes():
    rows = hpf.ERRATA + hpf_gibbs.ERRATA
    table = run_errata(rows)
    assert len(table) == len(rows) >= 7
    assert (~table.printed_passes).all(), table[table.printed_passes]
    assert table.corrected_passes.all(), table[~table.corrected_passes]
    assert table.ok.all()


def test_an_empty_table_has_the_columns():
    assert list(run_errata(())) == ["seed_file", "location", "printed", "corrected", "check", "printed_value",
                                    "corrected_value", "printed_passes", "corrected_passes", "ok"]
