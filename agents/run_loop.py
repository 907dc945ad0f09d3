"""A training run around its iterations: what ``Trainer.train`` does between them, and the files it
leaves. Evaluations before, during and after training; ``train.csv``, ``eval.csv``,
``eval_by_task.jsonl`` and TensorBoard (``agents.train_log``); a checkpoint every ``checkpoint_every``
iterations and after the last; the final adapter; ``summary.json``.

A fresh run removes an earlier run's outputs from its folder first; a resumed one cuts its logs back to
the checkpoint it continues from and keeps the first part's ``eval_before`` and the seconds of every part,
so a run stopped and resumed any number of times leaves the files an uninterrupted one would (bar the
seconds: ``benchmarks/learning/kill_resume.py`` checks this).
"""
from __future__ import annotations

import json
import time

from agents.checkpoints import replace_text, save_adapter
from agents.crash_points import crash_point
from agents.gpu_memory import progress_text
from agents.train_log import RunLogs, open_tensorboard, remove_run_outputs


def run_training(trainer) -> dict:
    """``trainer.train()``: the whole run from ``trainer.start_iteration``; returns the summary."""
    from tqdm.auto import tqdm
    c, out = trainer.cfg, trainer.out
    done = trainer.start_iteration - 1
    if not c.resume:
        remove_run_outputs(out)        # a fresh run starts over: no stale log line survives
    logs = RunLogs(out, trainer.run_record.resumed, done)    # cut back to the checkpoint, or emptied
    tb = open_tensorboard(out, done) if c.tensorboard else None
    trainer.run_record.start = time.perf_counter()

    def run_eval(it):
        ev = trainer.evaluate()
        crash_point("evaluation")
        if ev:
            logs.write_eval(it, ev, trainer.eval_by_task)
            trainer.run_record.kept["last_eval"] = it
            for k, v in ev.items() if tb else ():
                tb.add_scalar(f"eval/{k}", v, it)
        return ev

    if done == 0 and c.eval_before:
        trainer.run_record.kept["eval_before"] = run_eval(0).get("eval_success")
    elif eval_due(c, done) and not trainer.run_record.evaluated(done):
        run_eval(done)     # a finished run extended: its last iteration was not evaluated mid-run
    bar = tqdm(range(trainer.start_iteration, c.iterations + 1), disable=not c.progress, desc=c.estimator)
    for it in bar:
        m = trainer.iteration(it)
        logs.write_train(m)
        for k, v in m.items() if tb else ():
            if k != "iteration":
                tb.add_scalar(f"train/{k}", v, it)
        mem = progress_text(m)      # peak allocated/reserved GiB over the iteration's phases (CUDA)
        bar.set_postfix(success=f"{m['success']:.2f}", loss=f"{m['loss']:.3f}",
                        **({"mem": mem} if mem else {}))
        if eval_due(c, it):
            run_eval(it)
        if (c.checkpoint_every and it % c.checkpoint_every == 0) or it == c.iterations:
            trainer.save_checkpoint(it)
    after = {"eval_after": run_eval(c.iterations).get("eval_success")} if c.eval_at_end else {}
    save_adapter(trainer.model, out / "adapter")
    summary = {"preset": c.preset_name, "estimator": c.estimator, "seed": c.seed, "mode": trainer.mode,
               **after, **trainer.run_record.summary()}     # eval_before and the seconds of every part
    if tb:
        tb.close()
    replace_text(out / "summary.json", json.dumps(summary, indent=1))
    trainer.close()
    return summary


def eval_due(c, it: int) -> bool:
    """Whether iteration ``it`` (>= 1) is evaluated before its checkpoint: every ``eval_every``, but the
    last (the final evaluation comes after the last checkpoint)."""
    return bool(it and c.eval_every and it % c.eval_every == 0 and it != c.iterations)
