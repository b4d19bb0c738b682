"""`agora compare` end to end on tiny-random: a negotiation config trains the learner against
its scripted partner (single-agent arm) and beside a learning copy of itself (multi-agent arm),
one update each, then scores both arms' learner, v0 and latest, against the same scripted
partner on the same seeds."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.test_compare import _agent
from tests.stack_helpers import processes_of_run, tiny_config, write_config


def test_compare_trains_both_arms_and_scores_them_on_the_same_partner(tmp_path):
    cfg = tiny_config(
        models={"tiny": {"max_model_len": 1024}},
        agents=[{**_agent("alice"), "sampling": {"temperature": 1.0, "max_tokens": 12,
                                                 "stop": []}}],
        context_agents={"partner": {"cycle": ["fair", "greedy"], "every": 1}},
        environment={"name": "negotiation", "seats": ["alice", "context:partner"],
                     "prefill": "", "opponents": {"self": 1.0},
                     "negotiation": {"max_rounds": 2}},
        # batch_fill any: the multi arm's batch closes once alice or her peer has 4 turns
        # (the other trains on its turns of the same episodes); the default, every, is what
        # every other multi-agent run here trains with.
        ppo={"batch_turns": 4, "minibatch_turns": 4, "batch_fill": "any"},
        trainer={"max_updates": 3, "pin_cpus": False, "nice": 0},
        output_dir=str(tmp_path / "runs"))
    proc = subprocess.run(
        [sys.executable, "-m", "agora.cli", "compare", str(write_config(cfg, tmp_path / "n.yaml")),
         "--updates", "1", "--games", "4", "--run-id", "cmp"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-3000:]
    assert "held-out scores of the learner (before -> after)" in out
    single, multi = tmp_path / "runs" / "cmp-single", tmp_path / "runs" / "cmp-multi"
    summary = json.loads((multi / "compare.json").read_text())
    assert set(summary) == {"single-agent", "multi-agent"}
    # --updates 1 replaced the config's 3: each arm made exactly one update.
    assert [summary[a]["updates"] for a in summary] == [1, 1]
    # One vLLM start-up for both arms: the multi arm used the single arm's server as it ran
    # (its log is in the single arm's folder, the multi arm has none of its own).
    assert "policy-tiny: the single-agent arm's, still running" in out
    assert (single / "logs" / "policy-tiny.log").is_file()
    assert not (multi / "logs" / "policy-tiny.log").exists()
    # The multi arm trained alice's peer in the partner's seat; the single arm never had one.
    assert (multi / "adapters" / "alice-peer").is_dir()
    row = json.loads((multi / "metrics.jsonl").read_text().splitlines()[0])
    turns = {name: stats["turns"] for name, stats in row["agents"].items()}
    assert set(turns) == {"alice", "alice-peer"} and min(turns.values()) >= 1
    assert max(turns.values()) >= 4
    assert not (single / "adapters" / "alice-peer").exists()
    for arm, run_dir in (("single-agent", single), ("multi-agent", multi)):
        entry = summary[arm]
        assert entry["evaluation"] == "episodes" and entry["learner"] == "alice"
        for policy in ("before", "after"):
            deals = entry[policy]["deal_rate"]
            assert deals["n"] == 4 and 0.0 <= deals["rate"] <= 1.0
        report = json.loads((run_dir / "compare-eval" / "eval.json").read_text())
        section = report["sections"]["episodes"]
        # Both arms are scored against the scripted partner of the config as written, each
        # strategy in turn, the learner's v0 against its latest version.
        assert section["partners"] == {"partner": ["fair", "greedy"]}
        assert section["policies"]["baseline"]["labels"] == {"alice": "alice@v0"}
        assert section["policies"]["evaluated"]["labels"] == {"alice": "alice@v1"}
        assert processes_of_run(run_dir.name) == []
