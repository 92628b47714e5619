"""The published acceptance table (simserve/catalog/acceptance.csv): it validates, bad files fail with one
line naming the problem, and an unknown key lists the known ones."""

from __future__ import annotations

import pytest

from simserve.catalog.acceptance import COLUMNS, METHODS, SHIPPED, load_acceptance, lookup
from simserve.errors import SimserveError

HEADER = ",".join(COLUMNS)


def write(tmp_path, *rows: str, header: str = HEADER):
    path = tmp_path / "acc.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_shipped_table_validates_and_every_curve_is_a_cumulative_acceptance():
    table = load_acceptance()
    assert table, "the shipped table is empty"
    for key, curve in table.items():
        assert key[0] in METHODS
        assert all(0.0 <= a <= 1.0 for a in curve.acceptance), key
        assert all(b <= a for a, b in zip(curve.acceptance, curve.acceptance[1:], strict=False)), key
        # every row says where it came from and whether it is in-sample (calibration) or held out
        assert curve.source.startswith("https://"), key
        assert curve.note.split(";")[0] in ("calibration", "held-out"), key


def test_shipped_rows_as_published():
    # vLLM's CI baseline for Llama-3.1-8B + RedHat's EAGLE-3 head on MT-Bench (K=3), stored without conversion
    assert lookup("eagle3", "llama-3.1-8b", "mt-bench") == (0.7296, 0.5208, 0.3545)
    # DeepSeek-V3 MTP with one draft: published mean acceptance length 1.882 -> position-1 acceptance 0.882
    table = load_acceptance()
    assert table[("mtp", "deepseek-v3", "mt-bench")].mean_accepted_length() == pytest.approx(1.882)


def test_lookup_normalizes_names_and_resolves_catalog_aliases():
    want = lookup("eagle3", "llama-3.1-8b", "mt-bench")
    assert lookup("EAGLE3", "Llama_3.1 8B", "MT-Bench") == want
    assert lookup("eagle3", "meta-llama/Llama-3.1-8B-Instruct", "mt-bench") == want


def test_unknown_key_lists_the_known_ones_for_that_method():
    with pytest.raises(SimserveError) as err:
        lookup("eagle3", "llama-3.3-70b", "mt-bench")
    msg = str(err.value)
    assert "\n" not in msg
    assert "(eagle3, llama-3.3-70b, mt-bench)" in msg
    assert "eagle3/llama-3.1-8b/mt-bench" in msg and "mtp/" not in msg
    assert "--acceptance FILE" in msg


def test_unknown_method_lists_everything(tmp_path):
    path = write(tmp_path, "ngram,m,d,1,0.5,https://x,held-out")
    with pytest.raises(SimserveError, match=r"no rows for this method\): ngram/m/d;"):
        lookup("eagle", "m", "d", load_acceptance(path))


def test_a_user_file_loads(tmp_path):
    path = write(tmp_path, "eagle,m,d,1,0.8,https://x,n", "eagle,m,d,2,0.6,https://x,n")
    assert lookup("eagle", "m", "d", load_acceptance(path)) == (0.8, 0.6)


@pytest.mark.parametrize(
    ("rows", "header", "message"),
    [
        (
            ["eagle3,m,d,1,1.2,s,n"],
            HEADER,
            r"acceptance '1.2' of \(eagle3, m, d\) at position 1 is not a probability",
        ),
        (["eagle3,m,d,1,-0.1,s,n"], HEADER, r"is not a probability in \[0, 1\]"),
        (["eagle3,m,d,1,nan,s,n"], HEADER, r"is not a probability"),
        (
            ["eagle3,m,d,1,0.5,s,n", "eagle3,m,d,2,0.7,s,n"],
            HEADER,
            r"rises from 0.5 at position 1 to 0.7 at position 2",
        ),
        (["eagle3,m,d,1,0.5,s,n", "eagle3,m,d,3,0.4,s,n"], HEADER, r"has positions 1, 3; they must run 1..K"),
        (["eagle3,m,d,2,0.5,s,n"], HEADER, r"has positions 2; they must run 1..K"),
        (["eagle3,m,d,1,0.5,s,n", "eagle3,m,d,1,0.4,s,n"], HEADER, r"line 3: position 1 of .* given twice"),
        (
            ["medusa,m,d,1,0.5,s,n"],
            HEADER,
            r"line 2: method 'medusa' is not one of eagle, eagle3, mtp, ngram",
        ),
        (["eagle3,m,d,0,0.5,s,n"], HEADER, r"position '0' of \(eagle3, m, d\) must be a whole number >= 1"),
        (["eagle3,,d,1,0.5,s,n"], HEADER, r"must not be empty"),
        (["eagle3,m,d,1,0.5"], HEADER, r"expected 7 fields"),
        (["eagle3,m,d,1,0.5,s,n,extra"], HEADER, r"expected 7 fields"),
        ([], HEADER, r"has a header but no rows"),
        (
            ["eagle3,m,d,1,0.5,s"],
            "method,model,dataset,position,acceptance,source",
            r"header must be exactly",
        ),
    ],
)
def test_bad_file_fails_with_one_line(tmp_path, rows, header, message):
    path = write(tmp_path, *rows, header=header)
    with pytest.raises(SimserveError, match=message) as err:
        load_acceptance(path)
    assert "\n" not in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(SimserveError, match=r"does not exist; pass a CSV with columns method,model_family"):
        load_acceptance(tmp_path / "nope.csv")


def test_the_table_is_package_data():
    from fnmatch import fnmatch

    import tomllib

    root = SHIPPED.parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "simserve"
    ]
    assert any(fnmatch(str(SHIPPED.relative_to(root / "simserve")), p) for p in patterns)


def test_published_spec_results_are_complete_and_point_at_known_acceptance():
    import json

    doc = json.loads((SHIPPED.parents[2] / "benchmarks" / "published_spec.json").read_text())
    fields = set(doc["fields"])
    table = load_acceptance()
    ids = [r["id"] for r in doc["results"]]
    assert len(ids) == len(set(ids)) >= 4
    for result in doc["results"]:
        assert set(result) == fields, result["id"]
        assert result["source_url"].startswith("https://"), result["id"]
        assert result["points"] and all("speedup" in p for p in result["points"]), result["id"]
        if result["load_kind"]:
            assert all(result["load_kind"] in p for p in result["points"]), result["id"]
        if result["acceptance_key"]:
            lookup(*result["acceptance_key"], table=table)  # raises when the row is missing
