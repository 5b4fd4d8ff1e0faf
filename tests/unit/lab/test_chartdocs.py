"""The chart's README from values.yaml's `# --` comments (eventedpleg_lab.chartdocs), and Chart.yaml's
Artifact Hub annotations."""

from __future__ import annotations

from pathlib import Path

import yaml

from eventedpleg.models.nodeconfig import NodeConfigSpec
from eventedpleg_lab import chartdocs

VALUES = """\
# A section comment, not a description.
top:
  # -- First line
  # and its continuation.
  documented: 1
  # A plain comment: not a description.
  plain: x
  # -- A whole map in one row.
  whole:
    inner: {a: 1}
  list:
    - item: 1

# -- Top-level.
flag: false
"""


def test_described_follows_the_helm_docs_convention() -> None:
    assert chartdocs.described(VALUES) == {
        "top.documented": "First line and its continuation.",
        "top.whole": "A whole map in one row.",
        "flag": "Top-level.",
    }


def test_rows_type_the_defaults_and_name_what_is_undocumented() -> None:
    rows, missing = chartdocs.rows(VALUES)
    assert [(r.key, r.kind) for r in rows] == [
        ("top.documented", "int"),
        ("top.whole", "object"),
        ("flag", "bool"),
    ]
    assert rows[1].cells() == ("`top.whole`", "object", '`{"inner":{"a":1}}`', "A whole map in one row.")
    assert missing == ["top.plain", "top.list"]


def test_chart_readme_is_current_and_every_value_is_described() -> None:
    text, missing = chartdocs.readme()
    assert missing == []
    assert (chartdocs.CHART / "README.md").read_text() == text
    assert "| `prometheusRule.heldNodeSeconds` | int | `3600` |" in text
    assert "| `grafanaDashboard.enabled` | bool | `false` |" in text


def test_artifact_hub_annotations_parse_and_name_the_crd() -> None:
    meta = yaml.safe_load((chartdocs.CHART / "Chart.yaml").read_text())
    notes = meta["annotations"]
    crd = yaml.safe_load((Path(chartdocs.CHART).parents[1] / "crds" / "nodeconfig.yaml").read_text())
    (listed,) = yaml.safe_load(notes["artifacthub.io/crds"])
    assert listed["name"] == crd["metadata"]["name"]
    assert listed["kind"] == crd["spec"]["names"]["kind"]
    assert listed["version"] in [v["name"] for v in crd["spec"]["versions"]]
    (example,) = yaml.safe_load(notes["artifacthub.io/crdsExamples"])
    assert example["kind"] == listed["kind"]
    NodeConfigSpec.model_validate(example["spec"])  # the example is a valid NodeConfig
    assert {link["name"] for link in yaml.safe_load(notes["artifacthub.io/links"])} == {"source", "runbooks"}
    assert notes["artifacthub.io/license"] == "Apache-2.0"
