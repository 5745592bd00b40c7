"""canary: a profile judged on the live host it is meant for, kept only while it measurably helps."""
