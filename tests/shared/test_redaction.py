"""Leased values are cut out of text in every form a program is likely to print them."""

from __future__ import annotations

import base64
import random
import re
import string
import sys
import urllib.parse

import pytest

from bastion.shared.hostcuts import MIN_FRAGMENT_BYTES, DigestCutter, form_digests, new_salt
from bastion.shared.redaction import Redactor, folded, forms
from bastion.shared.streamcuts import HeldCuts

ALPHABET = string.ascii_letters + string.digits + "-_.~+/=!@#$%^&*"
TRIALS = 300


def random_secret(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(6, 48)))


def leaks(text: str, secret: str) -> bool:
    """Whether any form of the secret survives in `text` (its lines joined again)."""
    joined = text.replace("\r\n", "").replace("\n", "")
    return any(form in joined for form in forms(secret))


def test_a_value_in_the_middle_of_a_base64_blob_is_found_at_every_offset() -> None:
    rng = random.Random(5)
    misses = 0
    for _ in range(TRIALS):
        secret = random_secret(rng)
        prefix, suffix = rng.randbytes(rng.randint(0, 40)), rng.randbytes(rng.randint(1, 40))
        alphabet = rng.choice((base64.b64encode, base64.urlsafe_b64encode))
        blob = alphabet(prefix + secret.encode() + suffix).decode()
        text = Redactor([("TOKEN", secret)]).redact(f"data: {blob}\n")
        # The encoding of the value's whole 3-byte groups must be gone from the blob.
        offset = (-len(prefix)) % 3
        whole = secret.encode()[offset:]
        core = alphabet(whole[: len(whole) // 3 * 3]).decode()
        if core in text or "[secret TOKEN]" not in text:
            misses += 1
    assert misses == 0


@pytest.mark.parametrize("encode", ["hex", "HEX", "url", "url_plus", "raw"])
def test_hex_and_url_encoded_forms_embedded_at_random_offsets_are_cut(encode: str) -> None:
    rng = random.Random(encode)
    for _ in range(TRIALS):
        secret = random_secret(rng)
        shown = {
            "hex": secret.encode().hex(),
            "HEX": secret.encode().hex().upper(),
            "url": urllib.parse.quote(secret, safe=""),
            "url_plus": urllib.parse.quote_plus(secret),
            "raw": secret,
        }[encode]
        noise = "".join(rng.choice(" ,:;()[]{}<>") for _ in range(rng.randint(0, 30)))
        text = f"{noise}x={shown}&y=1{noise}"
        out = Redactor([("TOKEN", secret)]).redact(text)
        assert not leaks(out, secret) and "[secret TOKEN]" in out, (secret, text, out)


def test_a_value_split_across_lines_at_random_points_is_cut() -> None:
    rng = random.Random(7)
    for _ in range(TRIALS):
        secret = random_secret(rng)
        cuts = sorted(rng.sample(range(1, len(secret)), k=rng.randint(1, 3)))
        pieces = [secret[a:b] for a, b in zip([0, *cuts], [*cuts, len(secret)], strict=True)]
        text = "before\n" + rng.choice(("\n", "\r\n")).join(pieces) + "\nafter"
        out = Redactor([("TOKEN", secret)]).redact(text)
        assert secret not in out.replace("\r\n", "").replace("\n", "")
        # a dot or line break the value starts with is not cut: it tells nothing of it
        assert re.match(r"before\n[.\r\n]*\[secret TOKEN\]", out) and out.endswith("after")


def test_base64_wrapped_at_76_columns_is_cut() -> None:
    secret = "s3cr3t-value-" * 6
    blob = base64.encodebytes(b"header " + secret.encode() + b" trailer").decode()
    assert "\n" in blob.strip()
    out = Redactor([("LONG", secret)]).redact(blob)
    assert "[secret LONG]" in out and not leaks(out, secret)


def test_unrelated_text_is_left_alone() -> None:
    rng = random.Random(11)
    redactor = Redactor([("TOKEN", "k9-Zq!pw7R"), ("OTHER", "correct horse battery")])
    for _ in range(200):
        text = " ".join(rng.choice(("the", "a", "cat", "sat", "on", "mat", "1", "ok"))
                        for _ in range(30))  # fmt: skip
        assert redactor.redact(text) == text
    assert redactor.redact("") == ""


def test_overlapping_and_adjacent_values_are_cut_as_one_stretch() -> None:
    redactor = Redactor([("A", "abcdefgh"), ("B", "efghijkl")])
    assert redactor.redact("[abcdefghijkl]") == "[[secret A]]"
    assert redactor.redact("abcdefghabcdefgh") == "[secret A][secret A]"


def test_short_forms_are_not_looked_for() -> None:
    assert all(len(form) >= 4 for form in forms("abcdef"))


def host_shapes(rng: random.Random, secret: str) -> list[str]:
    """The value as a program may spell it into a host name it asks a proxy for."""
    raw = secret.encode()

    def labels(text: str) -> str:
        size = rng.randint(3, 40)
        return ".".join(text[i : i + size] for i in range(0, len(text), size))

    prefix = rng.randbytes(rng.randint(0, 6))
    return [
        labels(raw.hex()) + ".x.example",
        labels(raw.hex().upper()) + ".x.example",
        labels(base64.b32encode(prefix + raw).decode().rstrip("=").lower()) + ".x.example",
        labels(base64.urlsafe_b64encode(prefix + raw).decode().rstrip("=")).lower() + ".example",
        labels(secret).lower() + ".x.example",
    ]


def test_a_value_spelled_into_a_host_name_is_cut_by_the_redactor_and_by_digests() -> None:
    rng = random.Random(13)
    host_alphabet = string.ascii_letters + string.digits + "-_"
    for _ in range(100):
        # At least 20 bytes: every alignment's piece then carries MIN_FRAGMENT_BYTES or more.
        secret = "".join(rng.choice(host_alphabet) for _ in range(rng.randint(20, 40)))
        salt = new_salt()
        redactor = Redactor([("TOKEN", secret)])
        cutter = DigestCutter(salt, form_digests([("TOKEN", secret)], salt))
        for host in host_shapes(rng, secret):
            line = f"{host}:443 refused: not a declared host"
            for out in (redactor.redact(line), cutter.cut(line)):
                assert "[secret TOKEN]" in out, (secret, line, out)
                assert out.endswith(":443 refused: not a declared host")
                folded = out.lower().replace(".", "")
                assert secret.lower() not in folded and secret.encode().hex() not in folded


def test_a_value_that_is_not_ascii_is_cut_in_its_punycode_label() -> None:
    secret = "clé-" + "9f2c4d7e1a3b"
    host = f"{secret}.idn.example".encode("idna").decode()
    assert host.startswith("xn--")
    salt = new_salt()
    cutter = DigestCutter(salt, form_digests([("IDN", secret)], salt))
    assert Redactor([("IDN", secret)]).redact(host) == "[secret IDN].idn.example"
    assert cutter.cut(f"{host}:443 refused") == "[secret IDN].idn.example:443 refused"


def test_digests_cut_nothing_else_and_carry_no_short_piece_of_a_value() -> None:
    secret = "k9-Zq!pw7R-and-more"
    salt = new_salt()
    digests = form_digests([("TOKEN", secret)], salt)
    assert min(d.length for d in digests) >= MIN_FRAGMENT_BYTES
    cutter = DigestCutter(salt, digests)
    for line in ("pypi.org:443 allowed", "a.b.c.example:80 refused: port 80 is not declared"):
        assert cutter.cut(line) == line
    assert DigestCutter(new_salt(), digests).cut(secret) == secret  # another grant's salt


def test_a_value_reversed_or_spaced_out_is_cut() -> None:
    """An attack review printed a leased value backwards and with blanks between its
    characters, and both came back whole."""
    value = "pypi-Sup3rS3cretT0ken-ABCDEFGH12345"
    redactor = Redactor([("PYPI_TOKEN", value)])
    assert redactor.redact(f"REV {value[::-1]}") == "REV [secret PYPI_TOKEN]"
    assert redactor.redact(f"SPACED {' '.join(value)} end") == "SPACED [secret PYPI_TOKEN] end"


def one_pattern_per_form(pairs: list[tuple[str, str]], text: str) -> set[int]:
    """What cutting used to cut (one case-blind pattern per form, a line break or a dot
    allowed between any two characters): the indexes of `text` it covered."""
    covered: set[int] = set()
    for _, value in pairs:
        for form in forms(value):
            pattern = r"(?:\r?\n|\.)?".join(re.escape(char) for char in form)
            for found in re.finditer(pattern, text, re.IGNORECASE):
                covered.update(range(found.start(), found.end()))
    return covered


def shown_as(rng: random.Random, form: str) -> str:
    """`form` as a program may print it: letters in either case, a break here and there."""
    out = []
    for char in form:
        out.append(char.upper() if rng.random() < 0.3 else char)
        if rng.random() < 0.1:
            out.append(rng.choice(("\n", "\r\n", ".")))
    return "".join(out)


def test_one_pass_cuts_all_that_a_pattern_per_form_cut() -> None:
    """The automaton over all forms at once cuts every character the patterns did but the
    dots and line breaks a form starts or ends with (it may cut more: several breaks in a
    row, a value's dot left out)."""
    rng = random.Random(17)
    alphabet = ALPHABET + "\u00e9\u00df\u03c3\u017f\u0130\n"
    for _ in range(60):  # each trial compiles some sixty patterns
        pairs = [(f"S{i}", random_secret(rng) + rng.choice(alphabet)) for i in range(3)]
        noise = [rng.choice(alphabet + "  ") for _ in range(rng.randint(0, 60))]
        parts = ["".join(noise)]
        for _ in range(rng.randint(1, 4)):
            shown = rng.choice(sorted(forms(rng.choice(pairs)[1])))
            parts += [shown_as(rng, shown), "".join(rng.sample(noise, k=len(noise) // 2))]
        text = "".join(parts)
        cut = Redactor(pairs).spans(text)
        covered = {at for start, end, _ in cut for at in range(start, end)}
        told = {at for at in one_pattern_per_form(pairs, text) if text[at] not in ".\r\n"}
        assert told <= covered, (pairs, text)


def test_one_case_is_what_a_case_blind_pattern_matches() -> None:
    """Two characters a case-blind pattern matches to each other fold to one, for every
    character Python knows (a new Unicode version may add pairs)."""
    cased = [
        chr(point)
        for point in range(sys.maxunicode + 1)
        if not 0xD800 <= point < 0xE000
        and (chr(point).casefold() != chr(point) or chr(point).upper() != chr(point))
    ]
    full_fold: dict[str, set[str]] = {}
    for char in cased:
        full_fold.setdefault(char.casefold(), set()).add(char)
    missed = []
    for char in cased:
        others = {char.lower(), char.upper(), char.title(), char.upper().lower()}
        for other in (others | full_fold[char.casefold()]) - {char}:
            alike = len(other) == 1 and re.fullmatch(re.escape(char), other, re.IGNORECASE)
            if alike and folded(char) != folded(other):
                missed.append((char, other))
    assert not missed


def test_a_value_holding_a_dot_is_cut_printed_without_it_too() -> None:
    """What the one pass cuts beyond the forms (secrets.md): the breaks are dropped from the
    forms as from the text, so a value's own dot may be left out, or doubled."""
    redactor = Redactor([("JWT", "eyJhbGci.eyJzdWIi.c2lnbmF0dXJl")])
    for shown in ("eyJhbGci.eyJzdWIi.c2lnbmF0dXJl", "eyJhbGcieyJzdWIic2lnbmF0dXJl"):
        assert redactor.redact(f"token {shown} end") == "token [secret JWT] end"
    assert redactor.redact("eyJhbGci..\n.eyJzdWIi.c2lnbmF0dXJl") == "[secret JWT]"


def test_runs_of_dots_are_searched_once_whatever_the_value_starts_with() -> None:
    """From an attack review: a value starting with dots had a pattern of its own, which
    backtracked exponentially over a line of dots (24 dots: 33 s for one 49-dot line, with
    the GIL held), stalling every tenant. No form has a pattern now."""
    value = "." * 30 + "Tok-4f9a1c2e7b3d5a60"
    redactor = Redactor([("DOTS", value)])
    text = ("." * 61 + "\n") * 3 + "got " + value + "\n"
    out = redactor.redact(text)
    assert out == ("." * 61 + "\n") * 3 + "got " + "." * 30 + "[secret DOTS]\n"


def test_a_stream_of_blank_lines_is_not_held_back() -> None:
    """`yes ""` prints line breaks only: a run longer than MAX_BREAKS is a barrier, so the
    held text stays bounded and what is shown comes out as it comes."""
    cuts = HeldCuts(Redactor([("TOKEN", "Tok-4f9a1c2e7b3d5a60")]))
    shown = sum(len(cuts.take("\n" * 8192)) for _ in range(64))
    assert cuts.holding <= cuts.hold and shown + cuts.holding == 64 * 8192


def test_a_value_as_a_case_mapping_or_a_host_name_writes_it_is_cut() -> None:
    """From an attack review: case mappings that change a value's length (`ß` upper-cased
    is `SS`, `İ` lower-cased two characters, a ligature upper-cased two letters), and the
    punycode of a value a host-name tool lower-cased first, were shown."""
    redactor = Redactor(
        [("A", "Straße-geheim-1"), ("B", "İstanbul-key-77"), ("C", "ﬀtoken-9x"),
         ("D", "GEHEIMÄÖ-Zugang7")]
    )  # fmt: skip
    for shown in ("Straße-geheim-1".upper(), "İstanbul-key-77".lower(), "ﬀtoken-9x".upper()):
        assert redactor.redact(f"<{shown}>").count("[secret ") == 1, shown
    host = (
        f"curl: (6) Could not resolve host: {'GEHEIMÄÖ-Zugang7'.lower().encode('idna').decode()}.x"
    )
    assert "xn--" not in redactor.redact(host)
