"""Reading users' JSON and YAML files: the same rules for both formats (a BOM, a key given twice)."""
from __future__ import annotations

import pytest

from autotaccl.documents import read_document
from autotaccl.errors import InputError


@pytest.mark.parametrize("name, text", [("a.json", '{"a": [1, {"b": 2}]}'), ("a.yaml", "a: [1, {b: 2}]\n")])
def test_a_utf8_bom_is_accepted_in_json_and_yaml_alike(name, text, tmp_path):
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert read_document(path) == {"a": [1, {"b": 2}]}


@pytest.mark.parametrize("name, text, field", [
    ("a.json", '{"a": 1, "b": {"c": 1, "c": 2}}', "'c'"),
    ("a.yaml", "a: 1\nb:\n  c: 1\n  c: 2\n", "line 4"),
    ("a.yaml", "- {x: 1, x: 1}\n", "line 1"),
])
def test_a_key_given_twice_is_refused_naming_it(name, text, field, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as err:
        read_document(path)
    assert err.value.source == str(path) and err.value.field == field and "twice" in err.value.expected


def test_yaml_merge_keys_and_shared_aliases_are_not_duplicates(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("base: &b {x: 1, y: 2}\none: {<<: *b, x: 3}\ntwo: [*b, *b]\n")
    assert read_document(path)["one"] == {"x": 3, "y": 2}
