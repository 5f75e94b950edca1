"""An independent parser for the structured-field subset of SPEC H1: a List (RFC 8941
section 3.1) whose members are sf-string Items with Integer parameters:

    "ip";q=10;w=1, "user";q=100;w=3600

It follows RFC 8941 section 4.2 (parsing) for that subset and refuses everything else
(tokens, inner lists, decimals, booleans, byte sequences) with ValueError: a header that
is a valid structured field but outside the subset is a deviation from SPEC H1 too.
No third-party structured-field library is used on purpose: the suite checks the
integrations' writers with a reader of its own.
"""

from __future__ import annotations

Params = dict[str, int]
Member = tuple[str, Params]

_LCALPHA = "abcdefghijklmnopqrstuvwxyz"
_KEY_FIRST = _LCALPHA + "*"
_KEY_REST = _LCALPHA + "0123456789_-.*"
_DIGITS = "0123456789"


class _Input:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def take(self) -> str:
        c = self.peek()
        self.i += 1
        return c

    def done(self) -> bool:
        return self.i >= len(self.s)

    def skip_sp(self) -> None:
        while self.peek() == " ":
            self.i += 1

    def skip_ows(self) -> None:
        while self.peek() in (" ", "\t") and not self.done():
            self.i += 1

    def fail(self, what: str) -> ValueError:
        return ValueError(f"{what} at offset {self.i} of {self.s!r}")


def _string(inp: _Input) -> str:
    if inp.take() != '"':
        raise inp.fail("expected an sf-string")
    out = []
    while True:
        if inp.done():
            raise inp.fail("unterminated sf-string")
        c = inp.take()
        if c == "\\":
            if inp.done():
                raise inp.fail("dangling escape")
            nxt = inp.take()
            if nxt not in ('"', "\\"):
                raise inp.fail(f"bad escape \\{nxt}")
            out.append(nxt)
        elif c == '"':
            return "".join(out)
        elif not (0x20 <= ord(c) <= 0x7E):
            raise inp.fail(f"byte {ord(c):#04x} in an sf-string")
        else:
            out.append(c)


def _integer(inp: _Input) -> int:
    sign = 1
    if inp.peek() == "-":
        inp.take()
        sign = -1
    digits = ""
    while inp.peek() != "" and inp.peek() in _DIGITS:
        digits += inp.take()
        if len(digits) > 15:
            raise inp.fail("integer with more than 15 digits")
    if not digits:
        raise inp.fail("expected an integer")
    if inp.peek() == ".":
        raise inp.fail("a decimal (only integers are in the subset)")
    return sign * int(digits)


def _key(inp: _Input) -> str:
    c = inp.peek()
    if c == "" or c not in _KEY_FIRST:
        raise inp.fail("expected a parameter key")
    key = inp.take()
    while inp.peek() != "" and inp.peek() in _KEY_REST:
        key += inp.take()
    return key


def _params(inp: _Input) -> Params:
    params: Params = {}
    while inp.peek() == ";":
        inp.take()
        inp.skip_sp()
        key = _key(inp)
        if inp.peek() != "=":
            raise inp.fail(f"parameter {key!r} without a value (a boolean is outside the subset)")
        inp.take()
        params[key] = _integer(inp)  # RFC 8941: a repeated key keeps the last value
    return params


def parse_list(value: str) -> list[Member]:
    """Parses a field value (several field lines already joined with ", ")."""
    inp = _Input(value)
    inp.skip_sp()
    members: list[Member] = []
    if inp.done():
        return members  # an empty list (RFC 8941 4.2.1: the field is then ignored)
    while True:
        name = _string(inp)
        members.append((name, _params(inp)))
        inp.skip_ows()
        if inp.done():
            # trailing SP is stripped by RFC 8941 4.2 step 1-2 (handled by skip_ows)
            return members
        if inp.take() != ",":
            raise inp.fail("expected ',' between list members")
        inp.skip_ows()
        if inp.done():
            raise inp.fail("trailing ',' in a list")


def parse_lines(lines: list[str]) -> list[Member]:
    """Several field lines of one header are one list, in order (RFC 9110 5.3)."""
    return parse_list(", ".join(lines)) if lines else []
