"""Do SD's sampled outputs come from the reference's distribution?  A two-sample chi-square test.

Lossless SD (rejection sampling, Leviathan et al. 2023; Chen et al. 2023) promises that each output token
is distributed as the target model alone would sample it.  A broken sampler still writes plausible text,
so no token-match check can see it: only many samples on each side can.

The design, per prompt and per output position j: the reference's and SD's tokens at position j form a
2 x K table (the K-1 most frequent tokens of both sides pooled, the rest as one "other" column, merged
further until every expected count is at least 5, where the chi-square approximation holds).  Under the
null hypothesis both rows come from one distribution, and the statistic is chi-square with K-1 degrees of
freedom.  Where that merging leaves one column though the samples hold more than one token (60 x A and
7 x B against 67 x A: B's expected count is 3.5), the table is the most frequent token against the rest,
tested exactly (Fisher); only a position where both sides drew one and the same token says nothing.
Positions of one sequence are dependent, so the tables are combined by Bonferroni: the check fails when
any table's p-value is below alpha / (number of tables tested), which bounds the false-alarm rate by alpha
under any dependence.

Power is stated for an effect size w (Cohen's w of the 2 x K table with equal rows,
w^2 = sum_k (p_k - q_k)^2 / (2 (p_k + q_k)): `effect_size`), at which the statistic is noncentral chi-square with lambda = 2 n w^2 for n samples per side; `samples_needed` is the smallest n
that reaches the stated power with the planned number of categories.  Merging categories can only shrink
w, so the power is for the effect on the merged table.  Pure numerics: no scipy.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

__all__ = [
    "DistributionTest",
    "TableTest",
    "chi2_sf",
    "effect_size",
    "fisher_exact",
    "noncentral_chi2_sf",
    "power_of",
    "samples_needed",
    "same_distribution",
    "two_sample_table",
]

MIN_EXPECTED = 5.0  # the chi-square approximation's rule: every expected count at least this
OTHER = "(other)"


def _log_gamma_series(a: float, x: float) -> float:
    # The lower regularized gamma P(a, x) by its series (x < a + 1).
    total = term = 1.0 / a
    n = a
    for _ in range(10_000):
        n += 1
        term *= x / n
        total += term
        if abs(term) < abs(total) * 1e-15:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _upper_continued_fraction(a: float, x: float) -> float:
    # The upper regularized gamma Q(a, x) by Lentz's continued fraction (x >= a + 1).
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chi2_sf(x: float, df: float) -> float:
    """P(X > x) for X chi-square with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if x <= 0:
        return 1.0
    a, half = df / 2.0, x / 2.0
    if half < a + 1.0:
        return max(0.0, 1.0 - _log_gamma_series(a, half))
    return min(1.0, _upper_continued_fraction(a, half))


def noncentral_chi2_sf(x: float, df: float, lam: float) -> float:
    """P(X > x) for X noncentral chi-square (`df`, noncentrality `lam`): a Poisson(lam/2) mixture of
    central chi-squares with df + 2i degrees of freedom."""
    if lam <= 0:
        return chi2_sf(x, df)
    half = lam / 2.0
    centre = int(half)
    total = 0.0
    # Sum outwards from the Poisson mode until the weights are negligible.
    for i in range(max(0, centre - 2000), centre + 2000):
        weight = math.exp(-half + i * math.log(half) - math.lgamma(i + 1))
        if weight < 1e-17 and i > centre:
            break
        if weight >= 1e-17:
            total += weight * chi2_sf(x, df + 2 * i)
    return min(1.0, total)


def chi2_critical(alpha: float, df: float) -> float:
    """The x whose chi-square(`df`) survival is `alpha`."""
    lo, hi = 0.0, max(1.0, df)
    while chi2_sf(hi, df) > alpha:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if chi2_sf(mid, df) > alpha else (lo, mid)
    return hi


def power_of(n_per_side: int, w: float, df: int, alpha: float) -> float:
    """The chance the test rejects at level `alpha` when the true effect is `w`, with n samples per side."""
    return noncentral_chi2_sf(chi2_critical(alpha, df), df, 2.0 * n_per_side * w * w)


def samples_needed(w: float, df: int, alpha: float, power: float, limit: int = 1_000_000) -> int:
    """The smallest n per side that detects effect `w` with at least `power` at level `alpha`."""
    if not (w > 0 and 0 < power < 1 and 0 < alpha < 1):
        raise ValueError(f"need w > 0, 0 < power < 1, 0 < alpha < 1; got w={w}, power={power}, alpha={alpha}")
    critical = chi2_critical(alpha, df)
    lo, hi = 1, 2
    while noncentral_chi2_sf(critical, df, 2.0 * hi * w * w) < power:
        lo, hi = hi, hi * 2
        if hi > limit:
            raise ValueError(f"effect w={w} needs more than {limit} samples per side")
    while lo < hi:
        mid = (lo + hi) // 2
        if noncentral_chi2_sf(critical, df, 2.0 * mid * w * w) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo


def fisher_exact(ref: Sequence[int], sd: Sequence[int]) -> float:
    """Two-sided p-value of Fisher's exact test on the 2 x 2 table (rows `ref`, `sd`): the hypergeometric
    probability, given the margins, of every table no likelier than the one observed."""
    (a, b), (c, d) = ref, sd
    rows, column = (a + b, c + d), a + c

    def log_p(x: int) -> float:
        return _log_comb(rows[0], x) + _log_comb(rows[1], column - x) - _log_comb(sum(rows), column)

    observed, support = log_p(a), range(max(0, column - rows[1]), min(rows[0], column) + 1)
    # The relative slack keeps tables exactly as likely as the observed one, which rounding would drop.
    return min(1.0, sum(math.exp(log_p(x)) for x in support if log_p(x) <= observed + 1e-7))


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def effect_size(p: Sequence[float], q: Sequence[float]) -> float:
    """Cohen's w between two distributions over the same categories, for a 2 x K table with equal rows:
    w^2 = sum_k (p_k - q_k)^2 / (2 (p_k + q_k)), so the chi-square statistic's noncentrality is 2 n w^2."""
    return math.sqrt(sum((a - b) ** 2 / (2.0 * (a + b)) for a, b in zip(p, q) if a + b > 0))


@dataclass(frozen=True)
class TableTest:
    """One prompt's tokens at one output position (`position` None: whole continuations, by text)."""

    prompt: int
    position: int | None
    categories: tuple  # the columns: tokens (or texts), then OTHER when rare ones were pooled
    reference: tuple[int, ...]  # counts per category
    speculative: tuple[int, ...]
    statistic: float  # nan for an exact test
    df: int
    p_value: float
    exact: bool = False  # Fisher's exact test on the most frequent token against the rest
    texts: tuple = ()  # the categories decoded, where a tokenizer was given

    def describe(self) -> str:
        where = "continuation" if self.position is None else f"token {self.position}"
        test = "Fisher's exact test" if self.exact else f"chi2 {self.statistic:.1f} on {self.df} df"
        return (
            f"prompt {self.prompt + 1} {where}: {test}, p {self.p_value:.2g} "
            f"(reference {sum(self.reference)}, SD {sum(self.speculative)} samples, {len(self.categories)} categories)"
        )


def two_sample_table(
    reference: Sequence[Hashable], speculative: Sequence[Hashable], max_categories: int = 8
) -> tuple[tuple, tuple[int, ...], tuple[int, ...]]:
    """The 2 x K table of two samples: the most frequent tokens of both pooled, the rest merged into OTHER,
    then the rarest column merged in until every expected count is at least MIN_EXPECTED."""
    ref, sd = Counter(reference), Counter(speculative)
    pooled = (ref + sd).most_common()
    n1, n2 = len(reference), len(speculative)
    total = n1 + n2
    keep = [token for token, _ in pooled[: max_categories - 1]]
    while keep:
        rest = total - sum(ref[t] + sd[t] for t in keep)
        columns = [ref[t] + sd[t] for t in keep] + ([rest] if rest else [])
        if min(columns) * min(n1, n2) / total >= MIN_EXPECTED:
            break
        keep.pop()  # the rarest kept token joins OTHER
    categories = tuple(keep)
    ref_counts = [ref[t] for t in keep]
    sd_counts = [sd[t] for t in keep]
    if n1 - sum(ref_counts) or n2 - sum(sd_counts):
        categories += (OTHER,)
        ref_counts.append(n1 - sum(ref_counts))
        sd_counts.append(n2 - sum(sd_counts))
    return categories, tuple(ref_counts), tuple(sd_counts)


def _top_against_rest(reference: Sequence[Hashable], speculative: Sequence[Hashable]) -> tuple:
    ref, sd = Counter(reference), Counter(speculative)
    top = (ref + sd).most_common(1)[0][0]
    return (top, OTHER), (ref[top], len(reference) - ref[top]), (sd[top], len(speculative) - sd[top])


def _text(category: Hashable, decode: Callable[[list[int]], str]) -> str:
    # Token ids decode one by one; whole texts and OTHER are their own text.
    return decode([int(category)]) if isinstance(category, numbers.Integral) and not isinstance(category, bool) else ""


def _chi_square(ref: Sequence[int], sd: Sequence[int]) -> float:
    n1, n2 = sum(ref), sum(sd)
    total = n1 + n2
    statistic = 0.0
    for a, b in zip(ref, sd):
        column = a + b
        for observed, row in ((a, n1), (b, n2)):
            expected = row * column / total
            statistic += (observed - expected) ** 2 / expected
    return statistic


@dataclass(frozen=True)
class DistributionTest:
    """The verdict over every table; `passed` only when some table could be tested and none rejected."""

    tables: list[TableTest]
    untestable: int  # positions where both sides drew one and the same token (no information there)
    alpha: float
    effect: float  # the effect size w the power is stated for
    power: float  # the power the sample size was planned for (at the planned categories)
    planned_df: int
    samples_per_side: int
    temperature: float | None = None
    label: str | None = None  # SD's server, for the failure message
    # The samples tested, per prompt (kept so that another side can be tested against the same reference).
    reference_samples: list = field(default_factory=list, repr=False, compare=False)
    speculative_samples: list = field(default_factory=list, repr=False, compare=False)

    @property
    def table_alpha(self) -> float:
        return self.alpha / max(1, len(self.tables))

    @property
    def rejected(self) -> list[TableTest]:
        return [t for t in self.tables if t.p_value < self.table_alpha]

    @property
    def problem(self) -> str | None:
        if not self.tables:
            return (
                f"nothing to compare: in all {self.untestable} prompt positions both sides sampled one and the "
                "same token (raise the temperature or the prompts' variety, or test more positions)"
            )
        return None

    @property
    def passed(self) -> bool:
        return self.problem is None and not self.rejected

    @property
    def min_p_value(self) -> float:
        return min((t.p_value for t in self.tables), default=math.nan)

    def describe(self) -> str:
        exact = sum(t.exact for t in self.tables)
        # The power is the chi-square's: a table tested exactly had too few of its rarer tokens for it.
        head = (
            f"{len(self.tables)} tables (prompt x position; {self.untestable} more had the same single token on "
            "both sides), "
            f"{self.samples_per_side} samples per side per prompt, Bonferroni alpha {self.alpha:g} "
            f"({self.table_alpha:.2g} per table); detects an effect w >= {self.effect:g} with power "
            f">= {self.power:.0%} on up to {self.planned_df + 1} categories"
            + (f" ({exact} too sparse for chi-square, tested exactly: not covered by that power)" if exact else "")
        )
        if self.problem:
            return f"{head}: {self.problem}"
        worst = min(self.tables, key=lambda t: t.p_value)
        verdict = "differ" if self.rejected else "consistent with one distribution"
        return f"{head}; smallest p {worst.p_value:.2g} ({worst.describe()}): {verdict}"


def same_distribution(
    reference: Sequence[Sequence[Sequence[Hashable]]],
    speculative: Sequence[Sequence[Sequence[Hashable]]],
    *,
    alpha: float = 0.01,
    effect: float = 0.3,
    power: float = 0.9,
    max_categories: int = 8,
    samples_per_side: int | None = None,
    temperature: float | None = None,
    label: str | None = None,
    decode: Callable[[list[int]], str] | None = None,
) -> DistributionTest:
    """Test per prompt and position; `reference[p]` is prompt p's samples, each a sequence of tokens (a
    sample of one item, e.g. a whole text, gives one table per prompt with position None).  `decode`
    (token ids to text) puts each table's tokens as text beside their ids in a failure."""
    if len(reference) != len(speculative):
        raise ValueError(f"prompt counts differ: reference {len(reference)}, SD {len(speculative)}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if max_categories < 2:
        raise ValueError(f"max_categories must be >= 2, got {max_categories}")
    tables, untestable = [], 0
    for prompt, (ref_samples, sd_samples) in enumerate(zip(reference, speculative)):
        whole = all(len(s) == 1 for s in [*ref_samples, *sd_samples])
        positions = max((len(s) for s in [*ref_samples, *sd_samples]), default=0)
        for position in range(positions):
            ref = [s[position] for s in ref_samples if len(s) > position]
            sd = [s[position] for s in sd_samples if len(s) > position]
            if not ref or not sd:
                continue
            categories, ref_counts, sd_counts = two_sample_table(ref, sd, max_categories)
            # Which test a table gets depends on the pooled counts alone, the margins Fisher's test is
            # conditional on, so each table keeps its level and the Bonferroni count is the tables tested.
            if len(categories) >= 2:
                statistic, df, exact = _chi_square(ref_counts, sd_counts), len(categories) - 1, False
                p_value = chi2_sf(statistic, df)
            elif len(set(ref) | set(sd)) == 1:
                untestable += 1
                continue
            else:
                categories, ref_counts, sd_counts = _top_against_rest(ref, sd)
                statistic, df, exact = math.nan, 1, True
                p_value = fisher_exact(ref_counts, sd_counts)
            texts = tuple(_text(c, decode) for c in categories) if decode else ()
            where = None if whole else position + 1
            tables.append(
                TableTest(prompt, where, categories, ref_counts, sd_counts, statistic, df, p_value, exact, texts)
            )
    n = samples_per_side if samples_per_side is not None else min((len(s) for s in reference), default=0)
    return DistributionTest(
        tables,
        untestable,
        alpha,
        effect,
        power,
        max_categories - 1,
        n,
        temperature,
        label,
        reference_samples=[list(s) for s in reference],
        speculative_samples=[list(s) for s in speculative],
    )


FIRST_TOKEN_HINT = (
    "token 1 is sampled from the prefill's logits before any draft is verified, so SD does not draft it: a "
    "difference there means the two servers sample differently outside SD (temperature, top_p, top_k or seed "
    "not applied alike, or another build)"
)
DRAFTED_HINT = (
    "from token 2 on a token can be a draft the engine's rejection sampler accepted or replaced: a difference "
    "there and not at token 1 points at that sampler or at the temperature it applies to drafted positions "
    "(vLLM's CPU build divided drafted positions' logits by uninitialised memory: vllm-project/vllm#55005)"
)


def check_same_distribution(test: DistributionTest, what: str = "SD's sampled outputs") -> None:
    """Fail with every rejecting table (tokens, as text where decoded, and counts side by side) and where
    its positions point, or with why nothing was compared."""
    if test.passed:
        return
    who = f"{what}{f' ({test.label})' if test.label else ''}"
    at = "" if test.temperature is None else f" at temperature {test.temperature:g}"
    lines = [f"{who}{at} against the reference's: {test.describe()}"]
    for table in test.rejected[:5]:
        lines.append(f"  {table.describe()}")
        lines.append(f"    {'category':<32} {'reference':>10} {'SD':>10}")
        for category, text, a, b in zip(
            table.categories, table.texts or [""] * len(table.categories), table.reference, table.speculative
        ):
            shown = f"{category} {text!r}" if text else str(category)
            lines.append(f"    {shown[:32]:<32} {a:>10} {b:>10}")
    if len(test.rejected) > 5:
        lines.append(f"  ... and {len(test.rejected) - 5} more tables below alpha")
    positions = {t.position for t in test.rejected}
    if 1 in positions:
        lines.append(f"  {FIRST_TOKEN_HINT}")
    if positions - {1, None}:
        lines.append(f"  {DRAFTED_HINT}")
    raise AssertionError("\n".join(lines))
