"""The shorten stage (§3.5 trained short, tested long): nothing longer than short_training.max_len
reaches training, the other splits are the prepared ones, the counts are recorded."""

from __future__ import annotations

import json

from conftest import error_line, posenc

from posenc import tokens
from posenc.buckets import ShortTrainingConfig
from posenc.decode import EvalConfig


def test_only_short_pairs_reach_training_and_the_rest_is_copied(tiny_data):
    r = posenc("shorten", "--arrays", "data/prepared/arrays", "--spm", "data/prepared/spm.model",
               "--out", "data/short/arrays", "--stats", "data/short/stats.json", cwd=tiny_data)
    assert r.returncode == 0, r.stderr
    stats = json.loads((tiny_data / "data/short/stats.json").read_text())
    limit = stats["max_len"]
    assert limit == 30  # profiles/tiny.yaml
    prepared, short = tiny_data / "data/prepared/arrays", tiny_data / "data/short/arrays"
    src, tgt = (tokens.load(tokens.array_path(prepared, "train", lang), 3) for lang in ("en", "de"))
    kept = [(s.tolist(), t.tolist()) for s, t in zip(src, tgt) if len(s) <= limit and len(t) <= limit]
    got = list(zip(*(map(list, tokens.load(tokens.array_path(short, "train", lang), 3)) for lang in ("en", "de"))))
    assert got == kept and 0 < len(kept) < len(src)  # the same pairs, in order
    assert stats["train_pairs"] == {"kept": len(kept), "dropped": len(src) - len(kept)}
    assert max(stats["longest_kept"].values()) <= limit
    for path in prepared.glob("*.npy"):
        if not path.name.startswith("train."):
            assert (short / path.name).read_bytes() == path.read_bytes()
            if path.name.endswith(".en.npy"):
                split = path.name[:-len(".en.npy")]
                sources = tokens.load(path, 3)
                assert stats["sources_beyond_max_len"][split] == {
                    "sentences": len(sources), "beyond": sum(len(s) > limit for s in sources)}
    assert r.stdout.strip() == (f"shorten: training pairs of at most {limit} subwords: kept {len(kept):,}, "
                                f"dropped {len(src) - len(kept):,} -> data/short/arrays")


def test_a_bound_no_pair_meets_is_one_line_and_leaves_nothing(tiny_data):
    text = (tiny_data / "params.yaml").read_text().replace("  max_len: 30 ", "  max_len: 1 ")
    (tiny_data / "short1.yaml").write_text(text)
    r = posenc("shorten", "--params", "short1.yaml", "--arrays", "data/prepared/arrays", "--spm",
               "data/prepared/spm.model", "--out", "data/short1/arrays", "--stats", "data/short1/stats.json",
               cwd=tiny_data)
    assert error_line(r, "shorten") == ("posenc shorten: error: short1.yaml: short_training.max_len 1: no "
                                        "training pair is that short (subwords with EOS); raise it")
    assert not (tiny_data / "data/short1").exists()


def test_bucket_bounds_cover_every_length_once():
    from posenc.buckets import bucket_bounds, bucket_name, by_bucket

    bounds = bucket_bounds(16, (20, 25))
    assert [bucket_name(*b) for b in bounds] == ["1-16", "17-20", "21-25", "26+"]
    assert by_bucket([1, 16, 17, 20, 21, 25, 26, 90], bounds) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_a_short_run_is_scored_by_source_length_from_its_saved_hypotheses(tiny_data):
    from posenc import config, tokens
    from posenc.buckets import bucket_bounds, by_bucket
    from posenc.scoring import score

    r = posenc("shorten", "--arrays", "data/prepared/arrays", "--spm", "data/prepared/spm.model",
               "--out", "data/short/arrays", "--stats", "data/short/stats.json", cwd=tiny_data)
    assert r.returncode == 0, r.stderr
    name = "short-sinusoidal-1"
    r = posenc("train", "--variant", "sinusoidal", "--seed", "1", "--spm", "data/prepared/spm.model",
               "--arrays", "data/short/arrays", "--model", f"{name}/model.pt", "--last", f"{name}/last.pt",
               "--train-log", f"{name}/train_log.tsv", "--dev-log", f"{name}/dev_log.tsv",
               "--checkpoints", f"ck/{name}", "--timings", f"logs/{name}.json", "--digests",
               f"{name}/digests.json", "--highway", f"{name}/highway_log.tsv", cwd=tiny_data)
    assert r.returncode == 0, r.stderr
    r = posenc("lengths", "--seed", "1", "--model", f"{name}/model.pt", "--spm", "data/prepared/spm.model",
               "--arrays", "data/prepared/arrays", "--raw", "data/raw/multi30k", "--out",
               f"results/{name}/lengths.json", "--hyps", f"results/{name}/hyps", cwd=tiny_data)
    assert r.returncode == 0, r.stderr
    got = json.loads((tiny_data / f"results/{name}/lengths.json").read_text())
    cfg = config.load(tiny_data / "params.yaml", "short_training", ShortTrainingConfig)
    n = config.load(tiny_data / "params.yaml", "eval", EvalConfig).max_sentences
    assert got["max_len"] == cfg.max_len and got["splits"] == ["val", "test_2016_flickr", "test_2017_flickr",
                                                               "test_2017_mscoco"]
    lengths, hyps, refs = [], [], []
    for split in got["splits"]:
        lengths += [len(s) for s in tokens.load(tiny_data / f"data/prepared/arrays/{split}.en.npy", 3)[:n]]
        hyps += (tiny_data / f"results/{name}/hyps/{split}.de").read_text().split("\n")[:-1]
        refs += (tiny_data / f"data/raw/multi30k/{split}.de").read_text().split("\n")[:n]
    assert len(hyps) == len(lengths) == len(refs)
    groups = by_bucket(lengths, bucket_bounds(cfg.max_len, cfg.buckets))
    assert [b["sentences"] for b in got["buckets"]] == [len(g) for g in groups]
    for bucket, idx in zip(got["buckets"], groups):
        if idx:  # the saved hypotheses give the recorded scores
            assert bucket["bleu"] == score([hyps[i] for i in idx], [refs[i] for i in idx])["bleu"]
        assert 0 <= bucket["stopped_within_max_len"] <= len(idx)
