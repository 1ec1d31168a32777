"""Stage `fetch`: get a corpus from the mirror or the official source, verify it, write data/raw.

Output: <out>/<split>.en and <out>/<split>.de, UTF-8, aligned line by line, and <out>/fetch.json,
the record of what was fetched. Dev and test files are copied byte for byte (BLEU is scored
against them) and checked against their pinned hashes first, before any training text is read:
a wrong checksum stops the stage before the large download. Training pairs are stripped, empty
pairs dropped, and optionally a seeded subset is taken. A training set much smaller than the
corpus's known size (a mirror's sample) is refused unless data.max_train_pairs asks for a subset.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import os
import random
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from tqdm import tqdm

from posenc import files
from posenc.corpora import SRC, TGT, Corpus
from posenc.downloads import MIRROR_ENV, MULTI30K_URL, RECORD, SOURCES, CorpusSource, Source, read_record
from posenc.errors import UserError

LANGS = (SRC, TGT)
SAMPLE = 0.9  # below this share of the known size, a training set is a sample, not the corpus


def fetch(corpus: Corpus, out_dir: Path, mirror: Path | None, max_train_pairs: int | None,
          subset_seed: int, multi30k_url: str = MULTI30K_URL) -> dict[str, int]:
    """Write every split of `corpus` into `out_dir` (replaced whole, atomically); return line counts."""
    if mirror is not None and not mirror.is_dir():
        raise UserError(f"{MIRROR_ENV}={mirror}: no such directory; point it at a mirror laid out "
                        f"like ../shared/data/wmt, or unset it to download")
    tmp = out_dir.parent / f".{out_dir.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    counts, record, sources = {}, {}, SOURCES[corpus.name]
    try:
        # Dev and test first: their pinned hashes are checked before the training text is read.
        for split in sorted(corpus.splits, key=lambda s: s.role == "train"):
            source = sources.splits[split.name]
            if mirror is not None:
                parts, origin = _read_mirror(mirror, source), f"mirror: {source.mirror}"
            elif sources.kind == "multi30k":
                parts, origin = [_download_multi30k(multi30k_url, split.name)], "multi30k/dataset"
            elif source.sacrebleu is not None:
                parts, origin = [_download_sacrebleu(source.sacrebleu)], f"sacrebleu: {source.sacrebleu}"
            else:
                parts = [_download_hf(sources, split.name, source)]
                origin = f"hf: {'/'.join(sources.hf_name)} [{source.hf_split}]"
            # Each file (pair) is checked on its own, so that an error names the file at fault.
            lines = {lang: [] for lang in LANGS}
            for raw, where in parts:
                if source.sha256 is not None:
                    for lang in LANGS:
                        _verify(where[lang], raw[lang], source.sha256[lang])
                part = {lang: files.split_lines(_decode(where[lang], raw[lang])) for lang in LANGS}
                if len(part[SRC]) != len(part[TGT]):
                    raise UserError(f"{where[SRC]} has {len(part[SRC])} lines but {where[TGT]} has "
                                    f"{len(part[TGT])}; the two sides must be aligned line by line")
                for lang in LANGS:
                    lines[lang] += part[lang]
            # Pinned files are the same bytes from any source, so the record names the source
            # only for what is not pinned (the record, and so data/raw's hash, stays the same).
            entry = {"pairs": len(lines[SRC])} if source.sha256 else {"origin": origin, "read": len(lines[SRC])}
            if split.role == "train":
                named = ", ".join(where[SRC] for _, where in parts)
                pairs = _clean_pairs(lines[SRC], lines[TGT], named, max_train_pairs, subset_seed)
                if sources.train_pairs and max_train_pairs is None and len(pairs) < SAMPLE * sources.train_pairs:
                    raise UserError(f"{named}: {len(pairs):,} training pairs, but {corpus.name} has "
                                    f"{sources.train_pairs:,} (posenc/downloads.py): this source holds a "
                                    f"sample. Set data.max_train_pairs to train on a subset knowingly, "
                                    f"or unset {MIRROR_ENV} to download the corpus")
                for i, lang in enumerate(LANGS):
                    files.write_lines(tmp / f"{split.name}.{lang}", [p[i] for p in pairs])
                counts[split.name] = len(pairs)
                entry.update(pairs=len(pairs), known=sources.train_pairs, subset=max_train_pairs)
            else:
                for lang in LANGS:  # references stay byte for byte what was verified
                    files.write_bytes(tmp / f"{split.name}.{lang}",
                                      b"".join(raw[lang] for raw, _ in parts))
                counts[split.name] = len(lines[SRC])
            record[split.name] = entry
        files.write_json(tmp / RECORD, {"corpus": corpus.name,
                                        "splits": {s.name: record[s.name] for s in corpus.splits}})
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {s.name: counts[s.name] for s in corpus.splits}


def _clean_pairs(src: list[str], tgt: list[str], where: str, max_pairs: int | None,
                 seed: int) -> list[tuple[str, str]]:
    pairs = [(s.strip(), t.strip()) for s, t in zip(src, tgt)]
    pairs = [p for p in pairs if p[0] and p[1]]
    if not pairs:
        raise UserError(f"{where}: the training set has no non-empty pairs; check the mirror's files")
    if max_pairs is not None and max_pairs < len(pairs):
        keep = sorted(random.Random(seed).sample(range(len(pairs)), max_pairs))
        pairs = [pairs[i] for i in keep]
    return pairs


def _read_mirror(mirror: Path, source: Source) -> list[tuple[dict[str, bytes], dict[str, str]]]:
    """(bytes, path) per language for each file pair of a split (a glob may match several)."""
    stem = str(mirror / source.mirror)
    # Stems of either language, so that a file without its other side is named below.
    stems = sorted({p.rsplit(".", 1)[0] for lang in LANGS for p in glob.glob(f"{stem}.{lang}")}
                   or {stem}) if "*" in stem else [stem]
    parts = []
    for s in stems:
        where = {lang: f"{s}.{lang}" for lang in LANGS}
        for path in where.values():
            if not os.path.isfile(path):
                raise UserError(f"{path}: missing from the mirror; {MIRROR_ENV} must point at a "
                                f"directory laid out like ../shared/data/wmt")
        parts.append(({lang: Path(p).read_bytes() for lang, p in where.items()}, where))
    return parts


def _download_multi30k(base_url: str, name: str) -> tuple[dict[str, bytes], dict[str, str]]:
    raw, where = {}, {}
    for lang in LANGS:
        url = f"{base_url}/{name}.{lang}.gz"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                raw[lang] = gzip.decompress(response.read())
        except (urllib.error.URLError, OSError, EOFError) as e:
            raise UserError(f"{url}: download failed ({e}); retry, or set {MIRROR_ENV} "
                            f"to a local mirror") from None
        where[lang] = url
    return raw, where


def _download_sacrebleu(name: str) -> tuple[dict[str, bytes], dict[str, str]]:
    """A WMT test set as sacreBLEU delivers it (its en-de source and reference, text per line)."""
    from sacrebleu.dataset import DATASETS

    pair = f"{SRC}-{TGT}"
    try:
        dataset = DATASETS[name]
        dataset.process_to_text(pair)
        where = {SRC: dataset.get_source_file(pair), TGT: dataset.get_reference_files(pair)[0]}
        return {lang: Path(p).read_bytes() for lang, p in where.items()}, where
    except (Exception, SystemExit) as e:  # sacreBLEU exits on a failed download
        raise UserError(f"sacreBLEU test set {name} ({pair}): download failed ({type(e).__name__}); "
                        f"retry, or set {MIRROR_ENV} to a local mirror") from None


def _download_hf(sources: CorpusSource, name: str,
                 source: Source) -> tuple[dict[str, bytes], dict[str, str]]:
    import datasets  # heavy; only the real WMT14 download needs it

    path, config = sources.hf_name
    try:
        ds = datasets.load_dataset(path, config, split=source.hf_split)
    except Exception as e:  # network and hub errors come in many types
        raise UserError(f"HF datasets {path}/{config} [{source.hf_split}]: download failed "
                        f"({type(e).__name__}); retry, or set {MIRROR_ENV} to a local mirror") from None
    where = {lang: f"hf:{path}/{config}/{source.hf_split}.{lang}" for lang in LANGS}
    return hf_rows_to_text(tqdm(ds, desc=f"read {name}", unit=" pairs", mininterval=5)), where


def hf_rows_to_text(rows) -> dict[str, bytes]:
    """HF's `translation` rows ({"de": ..., "en": ...}), in order, as one UTF-8 line per row and
    language; a line break inside a segment becomes a space so that the sides stay aligned."""
    lines = {lang: [] for lang in LANGS}
    for example in rows:
        for lang in LANGS:
            lines[lang].append(example["translation"][lang].replace("\n", " "))
    return {lang: "".join(s + "\n" for s in lines[lang]).encode("utf-8") for lang in LANGS}


def _verify(where: str, data: bytes, expected: str) -> None:
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise UserError(f"{where}: SHA-256 {actual} does not match the pinned {expected} "
                        f"(posenc/downloads.py); the file is corrupt or another version: fetch it again")


def _decode(where: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise UserError(f"{where}: line {line} is not UTF-8 (byte 0x{data[e.start]:02x}); "
                        f"re-encode the file as UTF-8") from None


def run(args) -> None:
    from posenc import config, corpora

    cfg = config.load(args.params, "data", config.DataConfig)
    corpus = corpora.get(cfg.corpus)
    mirror = Path(os.environ[MIRROR_ENV]) if os.environ.get(MIRROR_ENV) else None
    counts = fetch(corpus, Path(args.out), mirror, cfg.max_train_pairs, cfg.subset_seed)
    source = f"mirror {mirror}" if mirror else "the official sources"
    train = read_record(Path(args.out))["splits"]["train"]
    where = f" (training text: {train['origin']}, {train['read']:,} read)" if "origin" in train else ""
    print(f"fetch: {corpus.name} from {source} -> {args.out}: "
          + ", ".join(f"{split} {n:,} pairs" for split, n in counts.items()) + where)
