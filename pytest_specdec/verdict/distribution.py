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

from .chi_square import chi2_critical, chi2_sf, noncentral_chi2_sf, power_of, samples_needed

__all__ = [
    "DistributionTest",
    "TableTest",
    "chi2_critical",
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
