"""The search tools: Glob (`glob_tool`) and Grep (`grep_tool`, its arguments and artifact in
`grep_artifact`, its two engines in `grep_engines`, the scanner both share in `grep_scan`), with
the pattern dialects (`patterns`) and the walk below an approved root (`walk`) they share."""
