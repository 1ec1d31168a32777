import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from posenc import config
from posenc.config import DataConfig, ModelConfig, TrainConfig
from posenc.decode import EvalConfig
from posenc.errors import UserError
from posenc.measures import AnalyzeConfig
from posenc.report_config import ReportConfig
from posenc.stages.extrapolate import ExtrapolateConfig
from posenc.stages.prepare import TokenizerConfig

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {"data": config.DataConfig, "tokenizer": TokenizerConfig,
            "train": config.TrainConfig, "eval": EvalConfig,
            "extrapolate": ExtrapolateConfig, "report": ReportConfig,
            "analyze": AnalyzeConfig}
IDS = dict(positional="sinusoidal", position=config.SinusoidalSettings(), vocab_size=100, pad_id=0,
           bos_id=2, eos_id=3)


@pytest.mark.parametrize("profile", ["params.yaml", "profiles/paper.yaml", "profiles/tiny.yaml"])
def test_every_profile_loads_into_every_section(profile):
    path = ROOT / profile
    for section, cls in SECTIONS.items():
        assert isinstance(config.load(path, section, cls), cls)
    model = config.load(path, "model", ModelConfig, **IDS)
    assert model.d_model % model.heads == 0
    variants = config.load_list(path, "variants", str)
    if profile != "profiles/tiny.yaml":  # the tiny profile runs five (its header says why)
        assert variants == tuple(config.POSITIONAL)  # all eight, in the registry's order
    for variant in config.POSITIONAL:  # every profile sets every variant's settings
        assert isinstance(config.load_positional(path, variant), config.POSITIONAL[variant])
    # the control for concat has concat's narrow token table
    assert (config.load_positional(path, "sinusoidal_narrow").dim
            == config.load_positional(path, "concat").dim)


def test_the_two_registries_name_the_same_variants():
    from posenc.positional import VARIANTS

    assert list(VARIANTS) == list(config.POSITIONAL)


@pytest.mark.parametrize("old, new, message", [
    ("clip: 16", "clip: 0", "positional.relative.clip: 0 is out of range; it must be >= 1"),
    ("base: 10000.0", "base: 1", "positional.rope.base: 1.0 is out of range; it must be > 1"),
    ("  alibi: {}", "  alibi: {slope: 1}", "positional.alibi.slope: unknown key"),
    ("    kind: sinusoidal", "    kind: cosine", "positional.concat.kind: 'cosine' is not one of"),
    ("  relative:\n    clip: 16", "", "positional.relative is missing; copy it from params.yaml"),
])
def test_bad_variant_settings_name_the_key(tmp_path, old, new, message):
    text = (ROOT / "params.yaml").read_text()
    assert old in text
    path = _params(tmp_path, text.replace(old, new, 1))
    variant = message.split(".")[1].split(":")[0].split(" ")[0]
    with pytest.raises(UserError, match=re.escape(message)):
        config.load_positional(path, variant)


@pytest.mark.parametrize("variant", ["concat", "sinusoidal_narrow"])
def test_a_control_narrower_or_wider_than_concat_is_refused_for_either_variant(tmp_path, variant):
    text = (ROOT / "params.yaml").read_text()
    old = "  sinusoidal_narrow:    # the control for concat: its narrow token table, the sinusoid summed\n    dim: 32"
    assert old in text
    path = _params(tmp_path, text.replace(old, old.replace("dim: 32", "dim: 8"), 1))
    with pytest.raises(UserError, match=re.escape(
            f"{path}: positional.sinusoidal_narrow.dim (8) must equal positional.concat.dim (32)")):
        config.load_positional(path, variant)


def test_paper_profile_keeps_the_base_settings():
    path = ROOT / "profiles" / "paper.yaml"
    m = config.load(path, "model", ModelConfig, **IDS)
    t = config.load(path, "train", TrainConfig)
    assert (m.d_model, m.d_ff, m.heads, m.layers, m.dropout) == (512, 2048, 8, 6, 0.1)
    assert (t.warmup, t.max_steps, t.average_last, t.label_smoothing) == (4000, 100000, 5, 0.1)
    assert config.load(path, "data", DataConfig).corpus == "wmt14"


def _params(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


GOOD_DATA = "data: {corpus: multi30k, max_train_pairs: null, subset_seed: 1, max_len: 100, max_ratio: 3}\n"


def test_a_good_section_loads_and_ints_become_floats(tmp_path):
    cfg = config.load(_params(tmp_path, GOOD_DATA), "data", DataConfig)
    assert cfg.max_ratio == 3.0 and isinstance(cfg.max_ratio, float) and cfg.max_train_pairs is None


@pytest.mark.parametrize("text, message", [
    (GOOD_DATA.replace("max_len", "max_lenn"), "data.max_lenn: unknown key"),
    (GOOD_DATA.replace("max_len: 100", "max_len: '100'"), "data.max_len: '100' is not an int"),
    (GOOD_DATA.replace("max_len: 100", "max_len: 1.5"), "data.max_len: 1.5 is not an int"),
    (GOOD_DATA.replace(", subset_seed: 1", ""), "data.subset_seed: missing"),
    (GOOD_DATA.replace("max_train_pairs: null", "max_train_pairs: true"), "data.max_train_pairs"),
    ("dta: {}\n", "unknown section 'dta'"),
    ("data: [1, 2]\n", "expected a mapping"),
    ("data: {corpus: [\n", "not valid YAML"),
])
def test_bad_params_name_the_key(tmp_path, text, message):
    with pytest.raises(UserError, match=message.replace(".", r"\.").replace("(", r"\(")):
        config.load(_params(tmp_path, text), "data", DataConfig)


def test_literal_and_tuple_fields_are_checked(tmp_path):
    text = (ROOT / "params.yaml").read_text()
    with pytest.raises(UserError, match=r"model\.norm: 'mid' is not one of 'post', 'pre'"):
        config.load(_params(tmp_path, text.replace("norm: post", "norm: mid")), "model", ModelConfig, **IDS)
    with pytest.raises(UserError, match=r"train\.adam_betas: expected a list of 2 values"):
        config.load(_params(tmp_path, text.replace("[0.9, 0.98]", "[0.9]")), "train", TrainConfig)


def test_fixed_fields_cannot_be_set_from_params(tmp_path):
    text = (ROOT / "params.yaml").read_text().replace("  d_model: 128", "  d_model: 128\n  vocab_size: 9")
    with pytest.raises(UserError, match=r"model\.vocab_size: unknown key"):
        config.load(_params(tmp_path, text), "model", ModelConfig, **IDS)


ALL = {**SECTIONS, "model": ModelConfig}


@pytest.mark.parametrize("section, old, new, message", [
    ("train", "max_steps: 1200", "max_steps: 0", "train.max_steps: 0 is out of range; it must be >= 1"),
    ("train", "warmup: 600", "warmup: -5", "train.warmup: -5 is out of range; it must be >= 1"),
    ("train", "accum: 1", "accum: 0", "train.accum: 0 is out of range; it must be >= 1"),
    ("train", "save_every: 100", "save_every: 0", "train.save_every: 0 is out of range"),
    ("train", "threads: 1  ", "threads: 0  ", "train.threads: 0 is out of range"),
    ("train", "average_last: 5", "average_last: 0", "train.average_last: 0 is out of range"),
    ("train", "average_last: 5", "average_last: 13", "train.average_last: 13 is more than the 12 "
     "checkpoints that max_steps 1200 with save_every 100 saves"),
    ("train", "lr_scale: 1.0", "lr_scale: .nan", "train.lr_scale: nan is not a finite float"),
    ("train", "lr_scale: 1.0", "lr_scale: 0", "train.lr_scale: 0.0 is out of range; it must be > 0"),
    ("train", "label_smoothing: 0.1", "label_smoothing: 1.0", "train.label_smoothing: 1.0 is out of "
     "range; it must be in [0, 1)"),
    ("train", "[0.9, 0.98]", "[0.9, 1.5]", r"train.adam_betas[1]: 1.5 is out of range"),
    ("model", "heads: 4", "heads: 0", "model.heads: 0 is out of range; it must be >= 1"),
    ("model", "dropout: 0.1", "dropout: 1.5", "model.dropout: 1.5 is out of range; it must be in [0, 1)"),
    ("eval", "beam: 4", "beam: 0", "eval.beam: 0 is out of range; it must be >= 1"),
    ("eval", "max_sentences: 0 ", "max_sentences: -1 ", "eval.max_sentences: -1 is out of range; "
     "it must be >= 0"),
    ("data", "max_train_pairs: null", "max_train_pairs: 0", "data.max_train_pairs: 0 is not an int >= 1 or null"),
    ("data", "max_ratio: 3.0", "max_ratio: 0.5", "data.max_ratio: 0.5 is out of range; it must be >= 1"),
    ("tokenizer", "character_coverage: 1.0", "character_coverage: 0", "tokenizer.character_coverage: "
     "0.0 is out of range; it must be in (0, 1]"),
    ("analyze", "subspace_share: 0.9", "subspace_share: 1.2", "analyze.subspace_share: 1.2 is out of range"),
])
def test_numbers_out_of_range_name_the_key_and_the_range(tmp_path, section, old, new, message):
    text = (ROOT / "params.yaml").read_text()
    assert old in text
    fixed = IDS if section == "model" else {}
    with pytest.raises(UserError, match=re.escape(message)):
        config.load(_params(tmp_path, text.replace(old, new, 1)), section, ALL[section], **fixed)


@pytest.mark.parametrize("key, value, message", [
    ("seeds", "[1, 1]", "seeds: 1 is listed twice; list each value once"),
    ("variants", "[sinusoidal, none, sinusoidal]", "variants: 'sinusoidal' is listed twice"),
    ("seeds", "[]", "seeds: the list is empty"),
    ("seeds", "[-1]", "seeds[0]: -1 is out of range; it must be >= 0"),
])
def test_top_level_lists_refuse_duplicates_and_bad_seeds(tmp_path, key, value, message):
    text = (ROOT / "params.yaml").read_text().replace(f"{key}: ", f"{key}: {value}  #", 1)
    item = config.NonNegative if key == "seeds" else str
    with pytest.raises(UserError, match=re.escape(message)):
        config.load_list(_params(tmp_path, text), key, item)


def test_duplicate_seeds_stop_the_report_with_one_line(tmp_path):
    text = (ROOT / "params.yaml").read_text().replace("seeds: [1, 2, 3]", "seeds: [1, 2, 1]")
    (tmp_path / "params.yaml").write_text(text)
    r = subprocess.run([sys.executable, "-m", "posenc", "report", *[a for o in (
        "--runs", "--raw", "--lock", "--table-md", "--findings-md", "--summary-md", "--table-json", "--table-csv",
        "--by-length-csv", "--curves-csv", "--extrapolation-csv", "--figures") for a in (o, f"out/{o[2:]}")]], cwd=tmp_path,
        capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr == "posenc report: error: params.yaml: seeds: 1 is listed twice; list each value once\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("base", [1.0e+308, 1.00000001])
def test_a_rope_base_float32_cannot_rotate_with_is_refused(base):
    from conftest import SMALL

    from posenc import positional

    c = dataclasses.replace(SMALL, positional="rope", position=config.RopeSettings(base))
    with pytest.raises(UserError, match=r"positional.rope.base \(.*\) gives rotation rates base\^\(-2i/8\) "
                                        r"that are not distinct in float32"):
        positional.check(c)
    positional.check(dataclasses.replace(c, position=config.RopeSettings(1.0e+30)))  # still distinct


@pytest.mark.parametrize("buckets", [[30, 10, 20, 15], [10, 10, 20]])
def test_length_buckets_that_do_not_rise_are_refused(buckets):
    with pytest.raises(UserError, match=r"length_buckets: .* must rise strictly"):
        ReportConfig(baseline="sinusoidal", bootstrap_samples=10, bootstrap_seed=0,
                            length_buckets=tuple(buckets))


def test_a_yaml_1_1_exponent_without_a_dot_gets_its_spelling(tmp_path):
    (tmp_path / "p.yaml").write_text("positional:\n  rope:\n    base: 1e308\n")
    with pytest.raises(UserError) as e:
        config.load_positional(tmp_path / "p.yaml", "rope")
    assert str(e.value) == f"{tmp_path / 'p.yaml'}: positional.rope.base: '1e308' is a string to YAML; write it as 1.0e+308"


def test_a_key_in_a_section_without_settings_says_it_takes_none(tmp_path):
    (tmp_path / "p.yaml").write_text("positional:\n  alibi:\n    slope: 2\n")
    with pytest.raises(UserError) as e:
        config.load_positional(tmp_path / "p.yaml", "alibi")
    assert str(e.value).endswith("positional.alibi.slope: unknown key; it takes no settings: write {}")


@pytest.mark.parametrize("section, key", [("extrapolate", "joins"), ("analyze", "variance_shares"),
                                          ("report", "length_buckets")])
def test_an_empty_list_is_refused_where_the_params_are_read(tmp_path, section, key):
    text = (ROOT / "params.yaml").read_text()
    start = text.index(f"\n  {key}: [") + len(f"\n  {key}: ")
    text = text[:start] + "[]" + text[text.index("]", start) + 1:]
    (tmp_path / "p.yaml").write_text(text)
    cls = {"extrapolate": ExtrapolateConfig, "analyze": AnalyzeConfig,
           "report": ReportConfig}[section]
    with pytest.raises(UserError, match=rf"{section}.{key}: the list is empty; give at least one value"):
        config.load(tmp_path / "p.yaml", section, cls)


def test_too_few_bootstrap_samples_for_an_interval_are_refused(tmp_path):
    text = (ROOT / "params.yaml").read_text().replace("bootstrap_samples: 1000", "bootstrap_samples: 1")
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(UserError, match=r"report.bootstrap_samples: 1 is out of range; it must be >= 100"):
        config.load(tmp_path / "p.yaml", "report", ReportConfig)


def test_a_report_of_one_variant_says_it_needs_two():
    from posenc.stages.report import comparisons

    with pytest.raises(UserError, match=r"variants: the report compares variants with the baseline "
                                        r"'sinusoidal'; list at least one more"):
        comparisons(["sinusoidal"], "sinusoidal")
