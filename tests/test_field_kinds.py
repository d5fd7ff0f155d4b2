"""Every field kind passes chute.testing.check_field_kind: written, opened and read back by
ds[i], slices, gather, the Loader, a mix and (slow, when installed) Ray."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import chute
from chute import fields
from chute.image.codec import decode_image, encode_image
from chute.testing import check_field_kind

RNG = np.random.default_rng(0)
N = 7  # three parts of 3, 3, 1


def _jpegs() -> list[bytes]:
    sizes = [(8, 12), (16, 16), (5, 9), (24, 8), (10, 10), (7, 31), (12, 6)]
    return [encode_image(RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)).data for h, w in sizes]


CASES = {
    "tensor": (
        fields.Tensor((2, 3), "float32"),
        [RNG.normal(size=(2, 3)).astype("f4") for _ in range(N)],
        None,
    ),
    "tensor-scalar-int16": (
        fields.Tensor((), "int16"),
        [np.int16(v) for v in range(-3, N - 3)],
        np.asarray,
    ),
    "tensor-bfloat16": (
        fields.Tensor((3,), "bfloat16"),
        [torch.randn(3).bfloat16() for _ in range(N)],
        None,
    ),
    "ragged": (
        fields.Ragged("int32"),
        [np.arange(k, dtype="i4") for k in (0, 3, 1, 7, 2, 5, 4)],
        None,
    ),
    "ragged-variable-dims": (
        fields.Ragged("uint8", (None, 3)),
        [
            RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)
            for h, w in [(1, 2), (3, 1), (2, 2), (0, 4), (2, 5), (1, 1), (4, 2)]
        ],
        None,
    ),
    "bytes": (
        fields.Bytes(),
        [bytes(RNG.integers(0, 256, k, dtype=np.uint8)) for k in (0, 5, 1, 9, 3, 2, 4)],
        None,
    ),
    "string": (fields.String(), ["", "a", "héllo", "日本語", "x" * 50, "tab\there", "end"], None),
    "image": (fields.Image(), _jpegs(), decode_image),
    "mask": (
        fields.Mask(),
        [
            RNG.integers(0, 21, (h, w), dtype=np.uint8)
            for h, w in [(8, 12), (1, 1), (5, 9), (24, 8), (0, 3), (7, 31), (12, 6)]
        ],
        None,
    ),
    "mask-uint16": (
        fields.Mask("uint16"),
        [
            RNG.integers(0, 60000, (h, w), dtype=np.uint16)
            for h, w in [(3, 2), (4, 4), (1, 9), (2, 8)]
        ],
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_kind_reads_back_every_way(case, tmp_path):
    kind, samples, expect = CASES[case]
    check_field_kind(kind, samples, tmp_path, expect, ray=False)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_every_kind_reads_back_through_ray(case, tmp_path):
    pytest.importorskip("ray.data")
    kind, samples, expect = CASES[case]
    check_field_kind(kind, samples, tmp_path, expect)


def test_every_kind_is_checked():
    assert {type(k) for k, _, _ in CASES.values()} == set(chute.kinds.KINDS.values())


def test_the_helper_reports_a_difference(tmp_path):
    samples = [np.arange(3, dtype="i4") for _ in range(4)]
    with pytest.raises(AssertionError, match=r"ds\[0\]"):
        check_field_kind(fields.Ragged("int32"), samples, tmp_path, lambda s: s + 1, ray=False)


def test_kinds_live_in_chute_fields():
    assert chute.fields.__all__ == ["Bytes", "Field", "Image", "Mask", "Ragged", "String", "Tensor"]
    assert chute.Ragged is fields.Ragged and chute.Bytes is fields.Bytes
    assert chute.String is fields.String and chute.Mask is fields.Mask
    assert "Tensor" not in chute.__all__ and "Image" not in chute.__all__


@pytest.mark.parametrize("name", ["Tensor", "Image"])
def test_colliding_top_level_names_still_work_but_warn(name):
    with pytest.warns(
        DeprecationWarning, match=rf"chute\.{name} is deprecated.*chute\.fields\.{name}"
    ):
        cls = getattr(chute, name)
    assert cls is getattr(fields, name)
    with pytest.warns(DeprecationWarning):
        exec(f"from chute import {name}", {})


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Tensr'"):
        chute.Tensr  # noqa: B018


def test_mask_refuses_other_dtypes_and_dimensions(tmp_path):
    with pytest.raises(chute.SchemaError, match="Mask: dtype"):
        fields.Mask("float32")
    with pytest.raises(chute.SchemaError):
        chute.write(
            tmp_path / "m.chute",
            {"m": [np.zeros((2, 2, 3), np.uint8)]},
            schema={"m": fields.Mask()},
        )


KIND_NAMES = {cls.__name__ for cls in chute.kinds.KINDS.values()} | {"FieldKind", "VarKind"}
SRC = Path(chute.__file__).parent


def _kind_dispatch(source: str) -> list[int]:
    """The lines of ``isinstance(x, <kind>)`` / ``type(x) is <kind>`` in a module's source
    (a kind named directly, or as an attribute of ``chute.kinds`` / ``chute.fields``)."""
    tree = ast.parse(source)
    names, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.module and ("kinds" in node.module or "fields" in node.module):
                names |= {a.asname or a.name for a in node.names if a.name in KIND_NAMES}
            modules |= {a.asname or a.name for a in node.names if a.name in ("kinds", "fields")}

    def is_kind(node: ast.expr) -> bool:
        if isinstance(node, ast.Tuple):
            return any(is_kind(e) for e in node.elts)
        if isinstance(node, ast.Name):
            return node.id in names
        return (
            isinstance(node, ast.Attribute)
            and node.attr in KIND_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        )

    def called(node: ast.AST, *funcs: str) -> bool:
        return (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in funcs
        )

    return [
        node.lineno
        for node in ast.walk(tree)
        if (called(node, "isinstance", "issubclass") and is_kind(node.args[-1]))  # type: ignore[attr-defined]
        or (
            isinstance(node, ast.Compare)
            and called(node.left, "type")
            and any(is_kind(c) for c in node.comparators)
        )
    ]


def test_only_the_kinds_themselves_dispatch_on_the_kind_of_a_field():
    """Behaviour that differs by kind is asked of the field (``fixed``, ``pads``, ``numeric``,
    ``encodes``, its methods); only ``chute/kinds/`` tests a field's class."""
    found = [
        f"{path.relative_to(SRC)}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).parts[0] != "kinds"
        for line in _kind_dispatch(path.read_text())
    ]
    assert found == []


def test_the_dispatch_check_sees_each_spelling():
    source = (
        "from .. import kinds\n"
        "from ..kinds import Ragged\n"
        "import torch\n"
        "a = isinstance(f, kinds.Image)\n"
        "b = isinstance(f, (int, Ragged))\n"
        "c = type(f) is kinds.Tensor\n"
        "d = isinstance(t, torch.Tensor)\n"
        "e = f.fixed\n"
    )
    assert sorted(_kind_dispatch(source)) == [4, 5, 6]
