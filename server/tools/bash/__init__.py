"""The Bash tool (`bash_tool`): its arguments and artifact (`artifact`), the command to start
(`command_spec`), a foreground command's output (`command_output`), what would escape process
supervision (`shell_escapes`) and background commands (`background`)."""
