"""LM access: every call to a language model goes through ``engine.lm.client`` (built on
litellm): providers, retries, the per-attempt journal, the content-addressed cache, costs, and
the offline local model."""
