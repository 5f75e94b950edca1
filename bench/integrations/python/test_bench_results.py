"""The results file's flood section (bench_flood.py's) survives bench_overhead.py's rewrite
and is replaced in place, not appended twice."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_overhead import FLOOD_END, flood_section, with_flood_section  # noqa: E402

SECTION_1 = "<!-- flood:begin (x) -->\n## Deny cache under a flood\nrun 1\n" + FLOOD_END
SECTION_2 = "<!-- flood:begin (x) -->\n## Deny cache under a flood\nrun 2\n" + FLOOD_END


def test_flood_section_is_appended_then_replaced_in_place(tmp_path: Path) -> None:
    first = with_flood_section("# Python integration\n\nbody\n", SECTION_1)
    assert first == "# Python integration\n\nbody\n\n" + SECTION_1 + "\n"
    second = with_flood_section(first + "tail\n", SECTION_2)
    assert second == "# Python integration\n\nbody\n\n" + SECTION_2 + "\ntail\n"
    out = tmp_path / "results.md"
    out.write_text(second)
    assert flood_section(out) == SECTION_2
    # what bench_overhead.py does when it rewrites the file: its own text, the section kept
    assert with_flood_section("# new overhead report\n", flood_section(out)).endswith(SECTION_2 + "\n")
    assert flood_section(tmp_path / "missing.md") == ""


def test_before_after_table_only_with_a_baseline_and_with_both_floors() -> None:
    from bench_overhead import before_after  # noqa: PLC0415

    med = {"ping": 1000.0, "rawping": 1250.0, "one": 900.0, "three": 800.0}
    cpu = {"one": 110.0, "three": 125.0}
    assert before_after("", "abc", med, cpu, {}) == []  # no --baseline: no section
    med |= {"one@base": 1000.0, "three@base": 800.0}
    cpu |= {"one@base": 100.0, "three@base": 125.0}
    results = {"one": [900.0, 950.0], "one@base": [1000.0, 950.0], "three": [800.0], "three@base": [800.0]}
    lines = before_after("88fc3cc", "abc", med, cpu, results)
    assert lines[0] == "## Before (88fc3cc) and after (abc), in the same rounds"
    one = next(ln for ln in lines if ln.startswith("| one policy"))
    # before: 1000 req/s = 1.00x redis-py's floor, 0.80x the raw floor; now 900: 0.90x / 0.72x
    assert "| 1000 (1.00x / 0.80x) | 900 (0.90x / 0.72x) | 0.90x |" in one
    assert "| 100 | 110 | 1.10x | 0.90x, 1.00x |" in one  # CPU now / before, then per round
    three = next(ln for ln in lines if ln.startswith("| three policies"))
    assert "| 1.00x |" in three
