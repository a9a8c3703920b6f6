"""The file tools: ReadFile, WriteFile and EditFile (`file_tools`)."""
