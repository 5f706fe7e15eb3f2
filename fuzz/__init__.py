"""Coverage-guided fuzzing of every parser of outside input (atheris); see docs/fuzzing.md."""
