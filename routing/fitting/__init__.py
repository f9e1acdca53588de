"""Fitting the confidence weights from labelled utterances."""
