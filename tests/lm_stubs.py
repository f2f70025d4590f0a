"""A stand-in for lm-eval's model interface in tests that only generate: `generate_until` is the
subclass's; the log-likelihood requests, which those tests never send, raise."""

from __future__ import annotations

from lm_eval.api.model import LM


class GenerateOnlyLM(LM):
    def loglikelihood(self, requests, disable_tqdm=False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError
