"""The statistics of fp8rl's tables and studies: intervals and tests over seeds, power, multiplicity,
counts and their dose response.

The report, the studies and the quoted figures call these; where scipy has the method, it computes it.
One module per kind: `intervals` (one mean), `welch` (two independent samples), `power` (Welch's and
the paired t's), `multiplicity` (Holm, fixed sequence), `exact` (counts), `dose_response` (counts
against a dose).

The seed is the unit: every interval in the tables treats a seed (one run) as one observation. Eval
scores have one value per seed; a per-step metric (steps nested in seeds) is first reduced to each
seed's mean over its finite steps (`finite_mean`; endpoints.csv's per-run values, fp8rl.report.endpoints:
every seed weighs the same, whatever its number of steps), because the steps of one run are correlated
and pooling them would overstate the sample size. Then:

- one mean: Student t-interval over the n seed values, df = n - 1 (`t_interval`:
  `scipy.stats.t.interval` about the mean with the standard error `scipy.stats.sem`);
  `one_sample_p`: the two-sided one-sample t-test against 0 (`scipy.stats.ttest_1samp`), and
  `p_from_interval` that p recovered from a published 95 % interval;
- Δ vs bf16: Welch's t-interval on the two sets of seed values (`welch`, `welch_interval`:
  `scipy.stats.ttest_ind(..., equal_var=False)` and its `confidence_interval`, which
  also give Welch's t, two-sided p and Welch–Satterthwaite df). bf16 and the variant are different
  runs; the report does not pair them by seed (a seed number fixes the data order and initial sampling,
  not a shared run), so the comparison is unpaired. `welch_power` simulates that test's power;
- `holm`: Holm's step-down adjustment of a family of p-values (scipy has none); `fixed_sequence`: the
  adjusted p-values of fixed-sequence testing (hypotheses in an order set before the data, each tested
  at the full alpha only while every earlier one is rejected: the running maximum of the p-values);
- divergence counts (a run diverges or it does not; with 3 seeds per cell the counts are small, so
  every figure is exact, never a normal approximation): `clopper_pearson(k, n)`, the exact interval of
  a rate k/n (`scipy.stats.binomtest(k, n).proportion_ci(method="exact")`; it covers at least the
  nominal level for every true rate), and `fisher_p`, the two-sided Fisher exact test of two rates
  (`scipy.stats.fisher_exact`; with 3 runs each, 0/3 vs 3/3 gives p = 0.10: no pair of 3-run cells can
  differ at the 5 % level). The dose-response fit of those counts is
  `dose_response`;
- the base as the unit (a study's contrasts, paired over bases): `paired_power`, the exact power of the
  paired t.

With three seeds the t-interval is the interval whose coverage holds: it is exact for normal seed
values, and a unit test (tests/unit/stats/test_intervals.py) simulates its coverage at n = 3 and
n = 5 with correlated steps nested in seeds. The hierarchical bootstrap over seeds × steps used before
covered 76-86 % at n = 3 and 84-91 % at n = 5 for a nominal 95 % in such simulations (at n = 3 its
intervals were 0.4× the t width): resampling 3 seeds cannot show the spread of a t with 2 df.

The details of one mean (the interval's exact formula, NaN and zero spread, rounding) are in `intervals`.
"""
