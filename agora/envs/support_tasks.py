"""Customer questions with ground-truth answers, generated from the support corpus's facts.

The facts below are the corpus (``data/corpus/*.md``, a fictional smart-home company,
Brightwave) in structured form: each names the document that states it, the words of its value
as the document writes them, and a search query that finds that document first (tests check
both against the real files and the real BM25 index). Questions are generated from them with a
seeded RNG, at three complexity levels:

1. one lookup: a fact as it stands ("How many days does express shipping take?");
2. one lookup + arithmetic with a number from the question ("What do 7 months of the Plus
   plan cost?");
3. two lookups + arithmetic ("What does a Brightwave Hub cost with express shipping?").

Level 1 needs only ``search``; levels 2-3 also need a calculator (or Python), which the triage
agent does not have by default, so they need a handoff to billing. A task's ``desk`` is the
specialist it belongs to (``billing`` for money and arithmetic, ``policy`` for rules and
product facts).

Answers are checked by ``check_answer``: numbers within a cent (the first number of the
answer counts, ``$`` and thousands separators allowed); text answers as a normalised phrase
inside a short answer (so listing every candidate does not pass).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

LEVELS = (1, 2, 3)
ARITHMETIC_TOOLS = ("calculator", "python")


@dataclass(frozen=True)
class Fact:
    fact_id: str
    doc: str  # data/corpus/<doc>.md states it
    value: float | str
    stated: str  # the value's words as the document writes them
    question: str  # a level-1 question about it
    query: str  # a search query that ranks ``doc`` first
    desk: str  # billing | policy


def _n(fact_id: str, doc: str, value: float, stated: str, question: str, query: str,
       desk: str = "policy") -> Fact:
    return Fact(fact_id, doc, value, stated, question, query, desk)


PLANS = ("Starter", "Plus", "Pro", "Team")
DEVICES = ("Hub", "Cam", "Doorbell", "Sensor", "Speaker", "Thermostat")
PLAN_PRICE = {"Starter": 8, "Plus": 15, "Pro": 32, "Team": 54}
PLAN_STORAGE = {"Starter": 50, "Plus": 200, "Pro": 1000, "Team": 5000}
DEVICE_PRICE = {"Hub": 129, "Cam": 79, "Doorbell": 99, "Sensor": 24, "Speaker": 59,
                "Thermostat": 149}
DEVICE_WARRANTY = {"Hub": 24, "Cam": 12, "Doorbell": 18, "Sensor": 12, "Speaker": 12,
                   "Thermostat": 36}
SHIPPING = {"standard": (5, 5), "express": (2, 12), "overnight": (1, 25)}  # days, dollars
COUNTRIES = {"Canada": ("canada", 7, 15), "the United Kingdom": ("uk", 9, 20),
             "the European Union": ("eu", 10, 22), "Australia": ("australia", 12, 28)}
CARRIERS = {"standard": "ParcelLine", "express": "SwiftPost", "overnight": "NightJet"}


def _facts() -> list[Fact]:
    facts: list[Fact] = []
    for plan in PLANS:
        key = plan.lower()
        facts.append(_n(f"{key}_price", f"plan-{key}", PLAN_PRICE[plan], f"${PLAN_PRICE[plan]}",
                        f"How many dollars per month does the {plan} plan cost?",
                        f"{plan} plan price per month", "billing"))
        facts.append(_n(f"{key}_storage", f"plan-{key}", PLAN_STORAGE[plan],
                        f"{PLAN_STORAGE[plan]} GB",
                        f"How many GB of storage does the {plan} plan include?",
                        f"{plan} plan storage GB"))
    for device in DEVICES:
        key = device.lower()
        facts.append(_n(f"{key}_price", f"device-{key}", DEVICE_PRICE[device],
                        f"${DEVICE_PRICE[device]}",
                        f"How many dollars does the Brightwave {device} cost?",
                        f"Brightwave {device} price", "billing"))
        facts.append(_n(f"{key}_warranty", f"device-{key}", DEVICE_WARRANTY[device],
                        f"{DEVICE_WARRANTY[device]} month",
                        f"How many months of warranty does the Brightwave {device} have?",
                        f"Brightwave {device} warranty"))
    for method, (days, cost) in SHIPPING.items():
        facts.append(_n(f"{method}_days", f"shipping-{method}", days,
                        f"{days} business day",
                        f"How many business days does {method} shipping take?",
                        f"{method} shipping days"))
        facts.append(_n(f"{method}_cost", f"shipping-{method}", cost, f"${cost}",
                        f"How many dollars does {method} shipping cost?",
                        f"{method} shipping cost", "billing"))
        facts.append(Fact(f"{method}_carrier", f"shipping-{method}", CARRIERS[method],
                          CARRIERS[method], f"Which carrier delivers {method} orders?",
                          f"{method} shipping carrier delivered", "policy"))
    for country, (key, days, cost) in COUNTRIES.items():
        facts.append(_n(f"{key}_days", f"shipping-{key}", days, f"{days} business days",
                        f"How many business days does shipping to {country} take?",
                        f"shipping to {country} days"))
        facts.append(_n(f"{key}_cost", f"shipping-{key}", cost, f"${cost}",
                        f"How many dollars is the shipping fee to {country}?",
                        f"shipping fee {country}", "billing"))
    facts += [
        _n("team_users", "plan-team", 5, "5 users",
           "How many users does the Team plan include?", "Team plan users included"),
        _n("extra_user_price", "plan-team", 9, "$9", "How many dollars per month does an "
           "extra user on the Team plan cost?", "Team plan extra user cost", "billing"),
        _n("annual_discount", "billing-annual", 20, "20%", "What percent discount does "
           "annual billing give?", "annual billing discount", "billing"),
        _n("student_discount", "discount-student", 15, "15%", "What percent discount do "
           "students get on plans?", "student discount", "billing"),
        _n("free_shipping_over", "shipping-free", 75, "$75", "Standard shipping is free on "
           "orders over how many dollars?", "free shipping orders over", "billing"),
        _n("return_days", "returns-window", 30, "30 days", "Within how many days can an "
           "unopened device be returned?", "return unopened device days"),
        _n("restocking_fee", "returns-opened", 10, "10%", "What percent restocking fee is "
           "kept when an opened device is returned?", "opened device restocking fee",
           "billing"),
        _n("sale_return_days", "returns-sale", 15, "15 days", "Within how many days can "
           "items bought on sale be returned?", "sale items return days"),
        _n("damaged_report_days", "returns-damaged", 7, "7 days", "Within how many days "
           "must a damaged delivery be reported?", "device arrives damaged report"),
        _n("subscription_refund_days", "refund-subscription", 14, "14 days", "Within how "
           "many days can a new subscription be cancelled for a full refund?",
           "subscription cancelled full refund days"),
        _n("late_fee", "billing-late-fee", 6, "$6", "How many dollars is the late payment "
           "fee?", "late payment fee", "billing"),
        _n("payment_retries", "billing-retries", 3, "3 times", "How many times is a failed "
           "card payment retried?", "failed card payment retry"),
        _n("grace_days", "billing-retries", 10, "10 days", "How many days is the grace "
           "period after a failed payment?", "failed payment grace period days"),
        _n("points_per_dollar", "loyalty-points", 2, "2 loyalty points", "How many loyalty "
           "points do members earn per dollar spent?", "loyalty points earn every dollar",
           "billing"),
        _n("points_redeem_value", "loyalty-redeem", 5, "$5", "How many dollars of discount "
           "are 100 loyalty points worth?", "redeem 100 loyalty points discount", "billing"),
        _n("referral_credit", "referral", 10, "$10", "How many dollars of credit does a "
           "referral give?", "referral link credit", "billing"),
        _n("gift_card_years", "gift-cards", 5, "5 years", "For how many years is a gift "
           "card valid?", "gift card valid years"),
        _n("price_match_days", "price-match", 14, "14 days", "Within how many days of a "
           "purchase does a price drop get refunded?", "price drop refund difference days"),
        _n("trade_in_credit", "trade-in", 30, "$30", "How many dollars of credit does "
           "trading in an old Hub give?", "trade in old Hub credit", "billing"),
        _n("careplus_price", "careplus", 4, "$4", "How many dollars per month per device "
           "does CarePlus cost?", "CarePlus extended warranty per month", "billing"),
        _n("outage_credit", "outage-credit", 10, "10%", "What percent of the monthly price "
           "is credited for a full day of outage?", "outage down full day credit", "billing"),
        _n("export_days", "data-export", 30, "30 days", "For how many days can recordings "
           "be exported after cancelling?", "export recordings after cancel"),
        _n("email_reply_hours", "support-hours", 24, "24 hours", "Within how many hours "
           "does email support answer?", "email support answers hours"),
        _n("install_fee", "install-service", 49, "$49", "How many dollars does the "
           "installation service cost per visit?", "technician install fee visit",
           "billing"),
        _n("gift_wrap_price", "gift-wrap", 3, "$3", "How many dollars does gift wrapping "
           "cost per item?", "gift wrapping price item", "billing"),
        _n("reset_link_minutes", "password-reset", 60, "60 minutes", "After how many "
           "minutes does a password reset link expire?", "password reset link expires"),
        _n("delete_wait_days", "account-delete", 7, "7 days", "How many days is the "
           "waiting period before an account deletion is final?", "delete account waiting "
           "period"),
        Fact("support_email", "support-hours", "help@brightwave.example",
             "help@brightwave.example", "What is the email address of support?",
             "email support address", "policy"),
    ]
    return facts


FACTS: dict[str, Fact] = {f.fact_id: f for f in _facts()}


@dataclass(frozen=True)
class SupportTask:
    """One customer question. ``steps`` is a reference solution (what the scripted oracle
    does): search queries in order, then the arithmetic expression over the looked-up values
    (empty at level 1)."""

    task_id: str
    level: int
    question: str
    answer: float | str
    desk: str
    facts: tuple[str, ...]
    expression: str = ""
    tools_needed: tuple[str, ...] = ("search",)
    queries: tuple[str, ...] = field(default=())

    @property
    def appropriate_tools(self) -> tuple[str, ...]:
        """Tools a call may use and count as accurate: search, and for arithmetic tasks
        either arithmetic tool."""
        return ("search", *ARITHMETIC_TOOLS) if self.expression else ("search",)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


Template = Callable[[random.Random], SupportTask]


def _task(level: int, key: str, question: str, facts: list[str], expression: str
          ) -> SupportTask:
    from agora.tools.builtins import calculate  # the same arithmetic the calculator does

    answer = round(float(calculate(expression)), 6)
    by_doc = {FACTS[f].doc: FACTS[f].query for f in facts}  # one search per document
    return SupportTask(f"L{level}-{key}", level, question, answer, "billing",
                       tuple(facts), expression, ("search", "calculator"),
                       tuple(by_doc.values()))


# ---------------------------------------------------------------- level 2: lookup + arithmetic

def _months_of_plan(rng: random.Random) -> SupportTask:
    plan, n = rng.choice(PLANS), rng.randint(2, 11)
    return _task(2, f"months-{plan.lower()}-{n}",
                 f"What do {n} months of the {plan} plan cost in total, in dollars?",
                 [f"{plan.lower()}_price"], f"{PLAN_PRICE[plan]}*{n}")


def _devices(rng: random.Random) -> SupportTask:
    device, n = rng.choice(DEVICES), rng.randint(2, 6)
    return _task(2, f"qty-{device.lower()}-{n}",
                 f"What do {n} Brightwave {device} devices cost in total, in dollars, before "
                 "shipping?", [f"{device.lower()}_price"], f"{DEVICE_PRICE[device]}*{n}")


def _restocking(rng: random.Random) -> SupportTask:
    price = rng.choice((40, 60, 80, 120, 150, 200, 250))
    return _task(2, f"restock-{price}", f"I am returning an opened device that cost ${price}. "
                 "How many dollars is the restocking fee?", ["restocking_fee"],
                 f"{price}*10/100")


def _points(rng: random.Random) -> SupportTask:
    spent = rng.choice((35, 60, 84, 129, 150, 240))
    return _task(2, f"points-{spent}", f"How many loyalty points do I earn on a ${spent} "
                 "device order?", ["points_per_dollar"], f"{spent}*2")


def _team_extra(rng: random.Random) -> SupportTask:
    users = rng.randint(6, 12)
    return _task(2, f"team-users-{users}", f"My team has {users} users on the Team plan. How "
                 "many dollars per month do the extra users cost?", ["team_users",
                                                                     "extra_user_price"],
                 f"({users}-5)*9")


def _careplus(rng: random.Random) -> SupportTask:
    devices, months = rng.randint(2, 5), rng.randint(2, 12)
    return _task(2, f"careplus-{devices}-{months}", f"What does CarePlus cost for {devices} "
                 f"devices over {months} months, in dollars?", ["careplus_price"],
                 f"4*{devices}*{months}")


# ----------------------------------------------------- level 3: two lookups + arithmetic

def _device_with_shipping(rng: random.Random) -> SupportTask:
    device, method = rng.choice(DEVICES), rng.choice(("express", "overnight"))
    return _task(3, f"{device.lower()}-{method}", f"What does one Brightwave {device} cost "
                 f"with {method} shipping, in dollars?",
                 [f"{device.lower()}_price", f"{method}_cost"],
                 f"{DEVICE_PRICE[device]}+{SHIPPING[method][1]}")


def _plan_difference(rng: random.Random) -> SupportTask:
    low, high = sorted(rng.sample(range(len(PLANS)), 2))
    a, b = PLANS[high], PLANS[low]
    return _task(3, f"diff-{a.lower()}-{b.lower()}", f"How many dollars more per month is the "
                 f"{a} plan than the {b} plan?", [f"{a.lower()}_price", f"{b.lower()}_price"],
                 f"{PLAN_PRICE[a]}-{PLAN_PRICE[b]}")


def _annual(rng: random.Random) -> SupportTask:
    plan = rng.choice(PLANS)
    return _task(3, f"annual-{plan.lower()}", f"What does one year of the {plan} plan cost "
                 "with annual billing, in dollars?", [f"{plan.lower()}_price",
                                                       "annual_discount"],
                 f"{PLAN_PRICE[plan]}*12*(100-20)/100")


def _student(rng: random.Random) -> SupportTask:
    plan = rng.choice(PLANS)
    return _task(3, f"student-{plan.lower()}", f"I am a student. How many dollars per month "
                 f"does the {plan} plan cost me?", [f"{plan.lower()}_price",
                                                    "student_discount"],
                 f"{PLAN_PRICE[plan]}*(100-15)/100")


def _opened_refund(rng: random.Random) -> SupportTask:
    device = rng.choice(DEVICES)
    return _task(3, f"refund-{device.lower()}", f"I return an opened Brightwave {device}. How "
                 "many dollars do I get back after the restocking fee?",
                 [f"{device.lower()}_price", "restocking_fee"],
                 f"{DEVICE_PRICE[device]}*(100-10)/100")


def _international(rng: random.Random) -> SupportTask:
    device, country = rng.choice(DEVICES), rng.choice(list(COUNTRIES))
    key = COUNTRIES[country][0]
    return _task(3, f"{device.lower()}-to-{key}", f"What does a Brightwave {device} shipped to "
                 f"{country} cost in total, in dollars?", [f"{device.lower()}_price",
                                                           f"{key}_cost"],
                 f"{DEVICE_PRICE[device]}+{COUNTRIES[country][2]}")


LEVEL_TEMPLATES: dict[int, tuple[Template, ...]] = {
    2: (_months_of_plan, _devices, _restocking, _points, _team_extra, _careplus),
    3: (_device_with_shipping, _plan_difference, _annual, _student, _opened_refund,
        _international),
}


TEST_FRACTION = 0.3  # share of the question space held out from support-sft's data


def task_split(question: str, test_fraction: float = TEST_FRACTION) -> str:
    """'test' or 'train' by a hash of the question: a fixed split of the question space, so
    a warm start (agora/train/support_sft.py) never sees the questions it is measured on. Level 1
    has one question per fact, so its test share is facts never shown."""
    digest = hashlib.sha1(question.encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2**64 < test_fraction else "train"


def make_task(level: int, seed: int) -> SupportTask:
    """The question of ``seed`` at ``level`` (deterministic)."""
    if level not in LEVELS:
        raise ValueError(f"support: level must be one of {LEVELS}, got {level}")
    rng = random.Random(f"support-{level}-{seed}")
    if level == 1:
        fact = FACTS[rng.choice(sorted(FACTS))]
        return SupportTask(f"L1-{fact.fact_id}", 1, fact.question, fact.value, fact.desk,
                           (fact.fact_id,), queries=(fact.query,))
    return rng.choice(LEVEL_TEMPLATES[level])(rng)


# --------------------------------------------------------------------------- answers

_ANSWER = re.compile(r"answer\s*:", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_WORDS = re.compile(r"[a-z0-9@.]+")
MAX_EXTRA_WORDS = 6  # a text answer may say this many words more than the truth


def final_answer(text: str) -> tuple[str, bool]:
    """The answer part of a final message: after the last ``ANSWER:`` (True), else the whole
    text (False)."""
    parts = _ANSWER.split(text)
    if len(parts) > 1:
        return parts[-1].strip(), True
    return text.strip(), False


def first_number(text: str) -> float | None:
    for match in _NUMBER.finditer(text):
        raw = match.group().replace(",", "")
        try:
            return float(raw)
        except ValueError:
            continue
    return None


def _words(text: str) -> list[str]:
    return [w.strip(".") for w in _WORDS.findall(text.lower()) if w.strip(".")]


def check_answer(answer: str, truth: float | str) -> bool:
    """Numbers: the answer's first number within a cent of the truth (answers are dollars,
    days, percents); text: the truth's words as a phrase of an answer at most
    ``MAX_EXTRA_WORDS`` words longer."""
    if isinstance(truth, int | float) and not isinstance(truth, bool):
        value = first_number(answer)
        return value is not None and math.isclose(value, float(truth), rel_tol=1e-9,
                                                  abs_tol=0.01 + 1e-9)
    want, got = _words(str(truth)), _words(answer)
    if not want or len(got) > len(want) + MAX_EXTRA_WORDS:
        return False
    return any(got[i:i + len(want)] == want for i in range(len(got) - len(want) + 1))


def format_answer(value: float | str) -> str:
    return _num(value) if isinstance(value, int | float) else str(value)
