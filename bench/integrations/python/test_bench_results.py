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


def test_backends_table_only_with_backends_medians_of_per_round_ratios() -> None:
    from bench_overhead import backends_table  # noqa: PLC0415

    results = {"ping": [1000.0, 1000.0, 1000.0], "rawping": [1250.0, 1250.0, 1250.0],
               "one": [900.0, 800.0, 1000.0], "three": [800.0, 800.0, 800.0]}
    app = {"one": [100.0, 100.0, 100.0], "three": [120.0, 120.0, 120.0]}
    server = {"one": [20.0, 20.0, 20.0], "three": [30.0, 30.0, 30.0]}
    assert backends_table(results, app, server) == []  # no --backends: no section
    results |= {"one-scripts": [450.0, 600.0, 500.0], "three-scripts": [400.0, 400.0, 400.0]}
    app |= {"one-scripts": [150.0, 150.0, 200.0], "three-scripts": [180.0, 180.0, 180.0]}
    server |= {"one-scripts": [60.0, 40.0, 60.0], "three-scripts": [0.0, 0.0, 0.0]}
    server["three"] = [0.0, 30.0, 30.0]  # a round with no CPU tick counted: no ratio
    lines = backends_table(results, app, server)
    assert lines[0] == "## The two backends end to end"
    one = next(ln for ln in lines if ln.startswith("| one policy"))
    # req/s per round 0.50x, 0.75x, 0.50x; app CPU 1.50x, 1.50x, 2.00x; redis 3.00x, 2.00x, 3.00x
    assert "| 0.50x (0.50-0.75x) | 1.50x (1.50-2.00x) | 3.00x (2.00-3.00x) |" in one
    # module: 0.90x / 0.72x of the floors (median of 0.90, 0.80, 1.00); scripts 0.50x / 0.40x
    assert one.endswith("| 0.90x (0.80-1.00x) / 0.72x (0.64-0.80x) | 0.50x (0.45-0.60x) / 0.40x (0.36-0.48x) |")
    three = next(ln for ln in lines if ln.startswith("| three policies"))
    assert "| 0.50x (0.50-0.50x) | 1.50x (1.50-1.50x) | n/a |" in three


def test_check_scripts_stops_a_run_not_on_the_scripts() -> None:
    import pytest  # noqa: PLC0415

    from bench_overhead import backend_line, check_scripts  # noqa: PLC0415

    line = backend_line("127.0.0.1:7000")
    assert line == "redis-tb: backend scripts on 127.0.0.1:7000 (forced by backend=scripts, Functions)"
    check_scripts("one-scripts", f"INFO: started\n{line}\nbench_app: stats.backend scripts\n", "127.0.0.1:7000")
    for log in ("", f"{line}\nbench_app: stats.backend None\n",
                "redis-tb: backend module on 127.0.0.1:7000 (tb.take found)\nbench_app: stats.backend scripts\n",
                f"{line.replace('Functions', 'EVALSHA')}\nbench_app: stats.backend scripts\n"):
        with pytest.raises(SystemExit):
            check_scripts("one-scripts", log, "127.0.0.1:7000")
