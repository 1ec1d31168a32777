"""`posenc <command> ...`: argument parsing only; each stage's `run(args)` does the work. Under
torchrun it also ends the process itself, past a teardown in torch that can hang (keep_process_groups).

Every path a stage reads or writes comes in as an argument (dvc.yaml names them all, once).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import sys

from posenc import config, numerics
from posenc.errors import UserError

# stage -> (module, {option: help})
STAGES = {
    "fetch": ("posenc.stages.fetch", "get the corpus from the mirror or the official source", {
        "--out": "directory for <split>.en / <split>.de"}),
    "prepare": ("posenc.stages.prepare", "train the joint SentencePiece model and encode every split", {
        "--raw": "directory written by fetch", "--spm": "SentencePiece model to write",
        "--arrays": "directory for the encoded splits", "--stats": "stats JSON to write"}),
    "shorten": ("posenc.stages.shorten", "keep the training pairs of at most short_training.max_len subwords (§3.5)", {
        "--arrays": "encoded splits (prepare's)", "--spm": "SentencePiece model",
        "--out": "directory for the shortened training split and the other splits, copied",
        "--stats": "stats JSON to write"}),
    "train": ("posenc.stages.train", "train one variant with one seed (also under torchrun)", {
        "--variant": "positional variant", "--seed": "random seed (int)",
        "--spm": "SentencePiece model", "--arrays": "encoded splits",
        "--model": "averaged model to write (§6.1: the test sets' model)",
        "--last": "last checkpoint's model to write (§6.2: the dev columns' model)",
        "--train-log": "per-update TSV to write",
        "--dev-log": "dev loss TSV to write", "--checkpoints": "working directory for checkpoints",
        "--timings": "untracked JSON of wall-clock figures",
        "--digests": "JSON of the weights' SHA-256 at every checkpoint (what posenc verify compares)",
        "--highway": "TSV of gradient and update sizes at each dev evaluation (the residual study)"}),
    "evaluate": ("posenc.stages.evaluate", "translate and score the dev and test sets with one model", {
        "--seed": "the seed the model was trained with (int)",
        "--model": "averaged model: scores the test sets (Table 2's protocol)",
        "--last": "last checkpoint's model: dev perplexity and dev BLEU (Table 3's protocol)",
        "--spm": "SentencePiece model", "--arrays": "encoded splits",
        "--raw": "directory with the untouched references",
        "--metrics": "metrics JSON to write (parameters, dev PPL, sacreBLEU; numbers only)",
        "--scores": "JSON of chrF and tok+compound-split BLEU to write",
        "--signatures": "JSON of the run's variant, seed and sacreBLEU signatures to write",
        "--hyps": "directory for the hypothesis files"}),
    "extrapolate": ("posenc.stages.extrapolate", "translate test sets joined k sentences at a time (§3.5)", {
        "--seed": "the seed the model was trained with (int)",
        "--model": "averaged model (the test sets' protocol)", "--spm": "SentencePiece model",
        "--arrays": "encoded splits (the longest training sentence)", "--raw": "the untouched test sets",
        "--out": "JSON of BLEU per test set and k to write"}),
    "lengths": ("posenc.stages.lengths", "translate every natural sentence, score it by source-length bucket (§3.5 trained short)", {
        "--seed": "the seed the model was trained with (int)",
        "--model": "averaged model of a short run", "--spm": "SentencePiece model",
        "--arrays": "encoded splits", "--raw": "the untouched references",
        "--out": "JSON of BLEU, chrF, length ratio and early stops per bucket to write",
        "--hyps": "directory for the hypothesis files"}),
    "report": ("posenc.stages.report", "the Table 3 table over seeds, the seed-aware test, extrapolation, provenance, figures", {
        "--runs": "directory of per-run results (metrics.json, hyps/, dev_log.tsv)", "--raw": "references",
        "--lock": "dvc.lock, for the data hashes (read, not a dependency)",
        "--table-md": "Markdown table to write", "--table-json": "JSON table to write",
        "--findings-md": "Markdown of the conclusions the table supports, to write",
        "--summary-md": "Markdown of README's summary: a line a question, and the main table, to write",
        "--table-csv": "CSV table to write", "--by-length-csv": "BLEU by source length, CSV to write",
        "--curves-csv": "every run's dev perplexity by update, CSV to write (the DVC plot)",
        "--extrapolation-csv": "BLEU by k per variant and test set, CSV to write",
        "--figures": "directory for the PNG figures"}),
    "earlier-runs": ("posenc.stages.earlier_runs", "the pinned table beside the earlier complete runs: per cell, and every Holm-significant conclusion", {
        "--table": "report's table.json", "--earlier": "directory of the earlier runs' table.json (<name>.json)",
        "--md": "Markdown comparison to write"}),
    "trained-short": ("posenc.stages.trained_short", "§3.5 trained short: BLEU by source length over seeds, the share kept beyond L, tested", {
        "--short-runs": "directory of the short runs' results (lengths.json, hyps/)",
        "--spm": "SentencePiece model (its EOS id)", "--arrays": "encoded splits (the source lengths)",
        "--raw": "references", "--table-md": "Markdown table to write",
        "--findings-md": "Markdown of the conclusions to write",
        "--summary-md": "README's short form: what was trained and tested, the conclusions as a list",
        "--table-json": "JSON table to write", "--by-length-csv": "BLEU by length bucket per variant, CSV to write",
        "--figures": "directory for the figures"}),
    "residuals": ("posenc.stages.residuals", "the residual study: sum, concat, none over seeds, the seed-aware test, the gradient highway", {
        "--runs": "directory of the positional runs' results (sum at model.layers is sinusoidal's)",
        "--residual-runs": "directory of the residual runs' results (metrics.json, hyps/, highway_log.tsv)",
        "--raw": "references",
        "--table-md": "Markdown table to write", "--findings-md": "Markdown of the conclusions to write",
        "--summary-md": "README's short form: which runs trained, each test against sum, the table",
        "--table-json": "JSON table to write", "--highway-csv": "the highway measures by update, CSV to write",
        "--figures": "directory for the figures"}),
    "measure": ("posenc.stages.measure", "measure one model for the conjectures of the sum-versus-concat debate", {
        "--seed": "the seed the model was trained with (int)",
        "--model": "averaged model", "--spm": "SentencePiece model", "--arrays": "encoded splits",
        "--raw": "references", "--out": "JSON of the measurements to write"}),
    "analyze": ("posenc.stages.analyze", "the conjectures of the sum-versus-concat debate, every run side by side", {
        "--runs": "directory of per-run results (analysis.json)", "--json": "analysis JSON to write",
        "--md": "analysis Markdown to write", "--figures": "directory for the PNG figures"}),
}
INTS = {"--seed"}
# commands that are not DVC stages: they write nothing the pipeline reads
TOOLS = {"translate": "posenc.stages.translate", "verify": "posenc.stages.verify", "cite": "posenc.cite",
         "pin": "posenc.stages.pin", "pins": "posenc.stages.pins",
         "export": "posenc.stages.export", "readme": "posenc.readme", "plots-page": "posenc.plots_page"}
# the commands that compute with torch: their numerics (params.yaml's `numerics`) are set before
# torch is imported (posenc.numerics); `verify` takes the mode the pinned run recorded
COMPUTES = {"train", "evaluate", "extrapolate", "lengths", "measure", "translate"}
TORCHRUN = "WORLD_SIZE" in os.environ  # one of torchrun's processes (as posenc.training tells)


DESCRIPTION = """\
Sum, concatenate or drop the positional encoding? The stages of a DVC pipeline that trains the
Transformer of Vaswani et al. 2017 with each positional variant (sinusoidal, learned, concat and
its control sinusoidal_narrow, none, rope, alibi, relative) and scores it. `make pin` (or `dvc
repro`) runs the stages in order, with the paths and params of dvc.yaml and params.yaml;
`posenc translate` translates your own sentences."""
EPILOG = "examples:\n  dvc repro\n  echo 'A man rides a horse.' | posenc translate --model models/sinusoidal-1/model.pt"


def parser() -> argparse.ArgumentParser:
    from importlib.metadata import version

    p = argparse.ArgumentParser(prog="posenc", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"posenc {version('posenc')}")
    sub = p.add_subparsers(dest="stage", required=True, metavar="command")
    for stage, (_, help_text, options) in STAGES.items():
        s = sub.add_parser(stage, help=help_text, description=help_text)
        s.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
        for option, option_help in options.items():
            s.add_argument(option, required=True, help=option_help, type=int if option in INTS else str,
                           **({"choices": list(config.POSITIONAL)} if option == "--variant" else {}))
        if stage == "train":
            s.add_argument("--residual", choices=["sum", "concat", "none"],
                           help="residual kind, in place of model.residual (the residual study)")
            s.add_argument("--layers", type=int, help="layers on each side, in place of model.layers "
                           "(the residual study)")
            s.add_argument("--until", type=int, help="stop after this update: write the logs and "
                           "digests so far, no models (what posenc verify runs)")
    t = sub.add_parser("translate", help="translate English lines to German with a trained model",
                       description="Translate English lines (stdin or -i) to German (stdout or -o), "
                       "one line out per line in, decoded as the evaluate stage decodes.")
    t.add_argument("--model", required=True, help="a trained model, e.g. models/sinusoidal-1/model.pt")
    t.add_argument("--spm", help="SentencePiece model (default: the one dvc.lock records for --model)")
    t.add_argument("-i", "--input", help="file of English lines (default: stdin)")
    t.add_argument("-o", "--output", help="file for the German lines (default: stdout)")
    t.add_argument("--beam", type=int, help="beam size (default: eval.beam of --params)")
    t.add_argument("--lenpen", type=float, help="length penalty alpha (default: eval.lenpen)")
    t.add_argument("--batch-tokens", type=int, help="source tokens per batch (default: eval.batch_tokens)")
    t.add_argument("--threads", type=int, help="CPU threads (default: eval.threads, 1: evaluations run "
                   "two at a time; give every core when translating alone)")
    t.add_argument("--params", default="params.yaml", help="params file for the defaults (default params.yaml)")
    t.add_argument("--lock", default="dvc.lock", help="dvc.lock, to find --model's SentencePiece model")
    v = sub.add_parser("verify", help="does this machine reproduce the pinned bits of a run? (minutes)",
                       description="Retrain the first checkpoint's updates of a pinned run and compare "
                       "its per-update losses and weight digest with the pinned ones; with the run's "
                       "model.pt pulled, also re-decode the first --sentences dev sentences and compare "
                       "them with the pinned hypotheses. Prints one verdict.")
    v.add_argument("run", nargs="?", default="sinusoidal-1", help="a pinned run, <variant>-<seed> "
                   "(default sinusoidal-1)")
    v.add_argument("--lock", default="dvc.lock", help="dvc.lock: the run's command, paths and params file")
    v.add_argument("--sentences", type=int, default=20, help="dev sentences to re-decode, each with "
                   "its whole batch, which sorting by length fills from all over dev (default 20; 0: none)")
    v.add_argument("--numerics", choices=["portable", "native"],
                   help="compute in this mode instead of the one the run recorded (to see a mismatch)")
    e = sub.add_parser("export", help="write a trained model as a CTranslate2 model (pip install -e '.[export]')",
                       description="Write a trained model as a CTranslate2 TransformerSpec model directory, "
                       "with its SentencePiece model beside it as spm.model, for every variant "
                       "CTranslate2 can express (all but alibi).")
    e.add_argument("--model", required=True, help="a trained model, e.g. models/sinusoidal-1/model.pt")
    e.add_argument("--out", required=True, help="directory to write (an existing one only with --force)")
    e.add_argument("--force", action="store_true", help="replace --out if it holds an exported model")
    e.add_argument("--spm", help="SentencePiece model (default: the one dvc.lock records for --model)")
    e.add_argument("--lock", default="dvc.lock", help="dvc.lock, to find --model's SentencePiece model")
    e.add_argument("--positions", type=int, default=1024, help="rows of the exported sinusoid table: "
                   "the longest source or output, in subwords with EOS, it serves (default 1024; a "
                   "learned table keeps its own rows)")
    n = sub.add_parser("pin", help="continue the pinning run: every unit not pinned, then the aggregates (make pin)",
                       description="Run every unit (one run's training and every stage that reads its weights) "
                       "that dvc.lock does not pin, JOBS at a time, then the aggregates; see docs/pipeline.md.")
    n.add_argument("--jobs", type=int, default=2, help="units side by side (default 2: one thread each)")
    n.add_argument("--units", type=int, help="run at most this many units, then stop")
    n.add_argument("--repin", action="store_true", help="re-pin units that the current code or params made stale")
    n.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
    n.add_argument("--logs", default="logs/pin", help="directory for each unit's DVC log (default logs/pin)")
    n.add_argument("--records", default="docs/records/units", help="directory for each finished unit's record "
                   "(CPU, threads, wall time; default docs/records/units)")
    q = sub.add_parser("pins", help="where the pinning run stands: units pinned, missing and stale, per part",
                       description="Per part, how many units dvc.lock pins under the current code and params, "
                       "and which are missing or stale (DVC's own answer: dvc repro --allow-missing --dry).")
    q.add_argument("--stage", dest="land", action="store_true", help="stage the whole units for a commit (dvc.lock in the "
                   "index holds them alone), never part of a unit")
    q.add_argument("--records", default="docs/records/units", help="the units' records (default docs/records/units)")
    q.add_argument("--md", help="write README's status block here (with --stage: results/pins.md, staged too)")
    c = sub.add_parser("cite", help="the BibTeX entry of this checkout, with its commit and the pinned table's md5",
                       description="Print the BibTeX entry to cite posenc at the commit of this checkout, with "
                       "the md5 dvc.lock records for results/table.json.")
    c.add_argument("--lock", default="dvc.lock", help="dvc.lock of the checkout (default dvc.lock)")
    g = sub.add_parser("plots-page", help="DVC's offline plots template with Vega inlined, for `dvc plots show -o` anywhere",
                       description="Write .dvc/plots/offline.html with the Vega scripts from node_modules inlined, "
                       "so that the page DVC renders from it draws without a network wherever it is written.")
    g.add_argument("--template", default=".dvc/plots/offline.html", help="the template (default .dvc/plots/offline.html)")
    g.add_argument("--node-modules", default="node_modules", help="where npm installed vega, vega-lite and vega-embed "
                   "(default node_modules)")
    g.add_argument("--out", default="build/offline-plots.html", help="the template to write (default build/offline-plots.html)")
    r = sub.add_parser("readme", help="copy the generated blocks into README.md and the pages of docs/",
                       description="Copy each generated file into README.md and docs/*.md between its "
                       "markers, and check that no figure of their prose is typed by hand.")
    r.add_argument("--readme", default="README.md", help="README.md; the pages of docs/ beside it too "
                   "(default README.md)")
    r.add_argument("--check", action="store_true", help="fail if README.md is out of date")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    code = run(args)
    if not TORCHRUN:
        return code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the groups kept are never destroyed (keep_process_groups); every output is closed


def keep_process_groups() -> None:
    """Make torch.distributed.destroy_process_group keep each group it destroys alive.

    Why: a gloo group's destructor joins its worker threads holding the GIL (pytorch/pytorch#56297).
    posenc.training destroys the group, then drops DDP, whose reducer held the last reference; a
    worker thread still releasing a tensor that Python dropped then waits for the GIL for ever (seen
    in CI: the paper profile's rank 1 stuck in `Reducer::~Reducer` -> `ProcessGroupGloo::
    ~ProcessGroupGloo` -> `thread::join`). The fix, DDP freed before the group, belongs in
    posenc.training, a dependency of every pinned training: it waits for the next re-pin."""
    import torch.distributed as dist

    kept, destroy = [], dist.destroy_process_group

    def destroy_and_keep(group=None):
        kept.append(dist.GroupMember.WORLD if group is None else group)
        destroy(group)

    dist.destroy_process_group = destroy_and_keep


def run(args) -> int:
    """Run one command; a user's error or a refused system call is one line and exit code 2."""
    module = TOOLS.get(args.stage) or STAGES[args.stage][0]
    try:
        if getattr(args, "seed", None) is not None and args.seed < 0:
            raise UserError(f"--seed {args.seed}: a seed is an int >= 0 (params.yaml: seeds)")
        if args.stage in COMPUTES:
            numerics.apply(config.load_value(args.params, "numerics", config.Numerics))
        elif args.stage == "verify":  # posenc.stages.verify imports torch only when it runs
            numerics.apply(importlib.import_module(module).mode(args))
        if TORCHRUN:  # torch loads here, after the numerics are set
            keep_process_groups()
        return importlib.import_module(module).run(args) or 0
    except UserError as e:
        print(f"posenc {args.stage}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # what the system refused, said as it is, with the fix that fits it
        where = f"{given(e.filename2 or e.filename)}: " if e.filename else ""  # a rename names its target second
        print(f"posenc {args.stage}: error: {where}{e.strerror or e}; {ADVICE.get(e.errno, ADVICE[None])}",
              file=sys.stderr)
        return 2


def given(path) -> str:
    """The path the user gave, where the system named the temporary file written beside it
    (posenc.files.write_bytes: .<name>.<pid>.<random>.tmp)."""
    temporary = re.fullmatch(r"\.(.+)\.\d+\.[^.]+\.tmp", os.path.basename(str(path)))
    return os.path.join(os.path.dirname(str(path)), temporary[1]) if temporary else str(path)


ADVICE = {errno.ENOENT: "check the path (a stage's input is made by the stage before it: `dvc repro`)",
          errno.EROFS: "the file system is read-only; write the outputs elsewhere",
          errno.EACCES: "no permission; write the outputs where you may, or change the permissions",
          errno.EPERM: "not permitted; write the outputs where you may, or change the permissions",
          errno.EISDIR: "a directory stands where a file is expected; give a file's path",
          errno.ENOTDIR: "a file stands where a directory is expected; give a directory's path",
          errno.ENOSPC: "free the space, then run it again (every file is written atomically: what was "
                        "written before stays whole)",
          errno.EFBIG: "lift the file-size limit, then run it again (every file is written atomically)",
          errno.EDQUOT: "free space within your quota, then run it again (every file is written atomically)",
          None: "fix the cause, then run it again (every file is written atomically: what was written "
                "before stays whole)"}


if __name__ == "__main__":
    sys.exit(main())
