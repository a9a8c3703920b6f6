"""Tool plugins grouped by family (`files`, `search`, `bash`, `processes`, and `fetch`, `tasks`,
`ask`, `skill`), all registered in one registry."""
