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
