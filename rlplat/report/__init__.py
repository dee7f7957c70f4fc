"""Comparing runs: groups of runs read back from MLflow, their final scores with stratified
bootstrap confidence intervals, time to a threshold, probability of improvement, and plots.

* :mod:`rlplat.report.runs`: which runs (a sweep's parent, experiments, run ids, filters),
  how they group, their metric histories;
* :mod:`rlplat.report.stats`: IQM, intervals, probability of improvement, performance
  profiles (``scipy.stats.bootstrap``);
* :mod:`rlplat.report.plots`: the plots (matplotlib);
* :mod:`rlplat.report.report`: the report itself, printed, written and logged.

``rlplat-compare`` and the end of every multirun use :func:`rlplat.report.report.report_runs`.
"""
