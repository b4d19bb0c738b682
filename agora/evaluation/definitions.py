"""The metric definitions printed at the top of eval.md (and repeated in docs/evaluation.md).

One place for the words, so the markdown, the docs and the code that computes the numbers
(``games``, ``discussion``, ``context_envs``, ``stats``) say the same thing.
"""

from __future__ import annotations

# The episode metrics that are 0/1 outcomes (rates), and those that are per-episode counts;
# every other env metric is a mean within 0..1.
BINARY_METRICS = {"deal_rate", "solved", "bug_fixed", "task_success", "success"}
COUNT_METRICS = {"tool_calls", "searches"}

INTERVALS = (
    "**Intervals.** Every `[lo, hi]` is a 95% interval: for a rate, the Wilson score interval "
    "(z = 1.96) over the stated number of trials; for a mean (a score, a reward), mean +- 1.96 "
    "x sample standard deviation / sqrt(n), clipped to the metric's range (none under two "
    "values)."
)

DEFINITIONS: dict[str, str] = {
    "round_robin": (
        "**Round robin (Tic-Tac-Toe).** Players: the evaluated agent's snapshots (its versions "
        "v0..vN, `--snapshots K` evenly spaced, first and last included; a checkpoint and the "
        "base model) and every scripted bot of the game. Every pair plays `--games N` games; in "
        "game g the pair's first player moves first when g is even (seats alternate). All moves "
        "are sampled with the agent's training sampling settings (at `--temperature` / "
        "`eval.temperature` when one is set: 0 = greedy). *win / draw / loss* = share of "
        "the N games from the row player's side; an illegal or unparsable move loses the game at "
        "once and also counts as a *forfeit*. *legal moves* = share of the row player's moves "
        "that were legal. *score* = (wins + draws / 2) / games."
    ),
    "duplicate": (
        "**Hanabi.** Cooperative, so nobody plays *against* anybody: each player (snapshots and "
        "scripted bots) plays `--games N` deals beside each partner (`self` = the player in every "
        "seat; a bot = that bot in every other seat), sitting in seat g mod seats in deal g (seed "
        "= `--seed` + g). *score* = mean team score (sum of the fireworks, 0-25; a forfeit ends "
        "the game with the fireworks so far). *forfeit* = share of games ended by the player's "
        "illegal move."
    ),
    "ratings": (
        "**Ratings.** TrueSkill (`trueskill` package, mu0 = 25, sigma0 = 25/3, beta = 25/6, "
        "draw probability = observed share of drawn comparisons, clamped to [0.01, 0.9]) over "
        "every comparison, fed interleaved across pairings. Ranked by the conservative skill mu "
        "- 3 sigma. Tic-Tac-Toe compares the round robin's games (win 1, draw 1/2, loss 0). "
        "Hanabi compares duplicates: two players that played the same deal in the same seat "
        "beside the same partner; the higher team score wins, equal scores draw. *score* = "
        "points / rated comparisons."
    ),
    "training_pool": (
        "**Training opponent pool.** The Elo ratings training left in `opponent_pool.json` "
        "(K = 32, start 1000; a game's win/draw/loss, else the higher mean reward wins): every "
        "frozen snapshot the learner met and the learner itself. Running ratings of a moving "
        "learner, without uncertainty (a game evaluation rates its players itself: TrueSkill)."
    ),
    "discussion": (
        "**Discussion (pass@k, maj@k).** Every held-out task (the config's test split, "
        "`--tasks` of them) is discussed k = `--k` times with the agents' sampling settings "
        "(temperature: `--temperature` / `eval.temperature` when set). "
        "Each answer is checked by the reward service's verifiers (math-verify / reasoning-gym's "
        "scorer, or the NLI label); its final answer (the extracted answer or label) is kept. "
        "Per round (*turn 1* = every agent answering alone; *last turn* = after the last round "
        "of reading each other) and per seat, with c of the k answers right: *pass@1* = mean "
        "of c / k; *pass@k* = mean of 1 - C(k-c, k) / C(k, k) (the unbiased estimator of Chen "
        "et al. 2021 with n = k samples: at least one of the k right); *maj@k* = share whose "
        "most common final answer among the k is right (no final answer = abstain; a tie goes "
        "to the answer given first). Means are over tasks x seats; the pass@1 interval counts "
        "all tasks x seats x k answers as trials (the k answers of a task are correlated, so it "
        "is too narrow), pass@k and maj@k over tasks x seats. *Paired by task*: per task, the "
        "round's share of right answers (k discussions x seats), evaluated minus baseline; "
        "mean over tasks with mean +- 1.96 x sd / sqrt(tasks), the task being the unit that "
        "varies independently; *better / worse* = tasks where the evaluated policy's share is "
        "higher / lower."
    ),
    "context": (
        "**Episodes (negotiation, story, code_debug, support, research).** The evaluated policy "
        "and its baseline (v0, or the base model for a checkpoint) each play the same `--games "
        "N` held-out seeds (1,000,000,000 + `--seed` + i: training and warm starts number their "
        "episodes from 0 and never reach them) in the config's seats; a scheduled partner "
        "plays each strategy of its schedule in turn (episode i: strategy i mod their number), "
        "the same for both policies, and the metrics are also given per partner strategy. "
        "Episodes are scored as in training (judge service, the "
        "reward service's sandbox, the support task's ground truth). Per LLM agent: *reward* = "
        "mean per-episode reward; 0/1 metrics (deal_rate, solved, bug_fixed, task_success) are "
        "rates; the others (utility, coherence, judge_score, story_score, preference, "
        "pass_rate, tool_accuracy, tool_calls) are means. *success* (task envs) = share of "
        "episodes whose task was done (code_debug: `solved`, every hidden test passes; support: "
        "`task_success`, the team's final answer is right). *Paired*: per metric (not the "
        "counts), evaluated minus baseline over the seeds both played, in points (x 100), "
        "which separates a difference the two versions' own intervals still overlap on. By "
        "seed where every seed poses a task of its own: for a 0/1 metric with Newcombe's "
        "(1998) square-and-add interval for paired proportions (its spread comes from the "
        "seeds where the two disagree), for a mean (utility, a judge score) the normal "
        "interval of the per-seed differences (a negotiation pool worth little to either "
        "version drops out); by task where "
        "seeds repeat tasks (code_debug: a held-out function and the author's strategy; "
        "support and research: a question; story: a premise): per task, the evaluated rate "
        "minus the baseline's, the mean over tasks with a normal interval over tasks, since "
        "a task's repeats are not independent (decoded greedily they are one answer). The "
        "rates' Wilson intervals of the episodes table count seeds, so where tasks repeat they are "
        "too narrow: read the means over tasks of the paired table."
    ),
    "preference": (
        "**Judge preference (story, negotiation, research).** Per seed, the judge service's "
        "`/v1/judge/pairwise` compares the evaluated policy's episode (a) with the baseline's "
        "(b): the whole story given the premise, the learner's negotiation messages given "
        "the item pool, or the team's answer given the question, with the env's rubric. The "
        "judge answers in both orders; prob_a = 1 "
        "(a wins both), 0 (b wins both) or 0.5 (tie, or the orders disagree = position bias). "
        "*preference rate* = mean prob_a over the seeds (0.5 = no difference); its interval is "
        "Wilson's over the number of seeds. Where the seeds repeat tasks (story: a premise and "
        "the co-writer's strategy), also the mean over tasks of each task's mean prob_a, with "
        "a normal interval over tasks, which `agora results` reads."
    ),
    "curves": (
        "**training_curves.png.** From the run's metrics.jsonl (one row per trainer update): "
        "mean turn reward of the update's batch; rates (legal-move rate of the batch, win rate "
        "vs random and env metrics over the last 100 episodes, Hanabi score / 25); KL to the "
        "adapter-disabled reference per token; policy-gradient and value losses; per agent."
    ),
}
