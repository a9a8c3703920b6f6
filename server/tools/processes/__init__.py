"""The supervised-process tools (`process_tools`: ProcessOutput, ProcessInput, ProcessStop), the
per-session process supervisor (`supervisor`), a process's output log (`output_log`) and that
output made safe to show (`terminal_text`)."""
