"""The shorten stage (§3.5 trained short, tested long): nothing longer than short_training.max_len
reaches training, the other splits are the prepared ones, the counts are recorded."""

from __future__ import annotations

import json

from posenc import tokens

from conftest import error_line, posenc


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
