from pathlib import Path

import pytest

from posenc import config
from posenc.config import DataConfig, ModelConfig, TrainConfig
from posenc.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {"data": config.DataConfig, "tokenizer": config.TokenizerConfig,
            "train": config.TrainConfig, "eval": config.EvalConfig,
            "report": config.ReportConfig, "analyze": config.AnalyzeConfig}
IDS = dict(positional="sinusoidal", vocab_size=100, pad_id=0, bos_id=2, eos_id=3)


@pytest.mark.parametrize("profile", ["params.yaml", "profiles/paper.yaml", "profiles/tiny.yaml"])
def test_every_profile_loads_into_every_section(profile):
    path = ROOT / profile
    for section, cls in SECTIONS.items():
        assert isinstance(config.load(path, section, cls), cls)
    model = config.load(path, "model", ModelConfig, **IDS)
    assert model.d_model % model.heads == 0
    assert set(config.load_list(path, "variants", str)) == {"sinusoidal", "learned", "concat", "none"}


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
