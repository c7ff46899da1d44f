"""Deciding pass or fail: assertions on a result, statistics, stored baselines and the regression gate."""
