"""What a run found, as data (results/findings.json) and as sentences
(results/findings.md): each finding's headline, text, flags and the tables behind it."""
