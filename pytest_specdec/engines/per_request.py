"""The one per-request vocabulary every engine's `request_sd` speaks: vLLM's names.

vLLM's ``--per-request-spec-decode-metrics`` names, for every engine: the
per-request readers (per-group acceptance, a run's counters summed from its
responses, the per-step analyses) read one shape whatever the engine that
answered.  An engine that knows less returns fewer keys (llama.cpp: no step
count), never other names.  Nothing here imports anything, so the readers in
`measure` can depend on it without depending on the engines.
"""

STEPS = "num_spec_steps"  # verify steps that drafted
DRAFTED = "num_draft_tokens"  # draft tokens proposed
ACCEPTED = "num_accepted_draft_tokens"  # draft tokens accepted (the bonus token excluded)
PER_STEP_ACCEPTED = "per_step_accepted"  # accepted drafts of each verify step
PER_STEP_DRAFTED = "per_step_drafted"  # proposed drafts of each verify step
DRAFT_LENGTH = "num_spec_tokens"  # k
# Steps that accepted i drafts, at index i: an engine that keeps no per-step order or draft length in its
# response (SGLang) gives this until the run is over, when its server's k makes the per-step arrays
# (`Engine.settle_request_sd`).
HISTOGRAM = "accepted_histogram"
# Why the engine's figures for this request cannot be read (the figures are then left out, never guessed):
# set instead of failing the request inside its stream.
PROBLEM = "problem"
PER_REQUEST_FIELDS = frozenset(
    {STEPS, DRAFTED, ACCEPTED, PER_STEP_ACCEPTED, PER_STEP_DRAFTED, DRAFT_LENGTH, HISTOGRAM, PROBLEM}
)
