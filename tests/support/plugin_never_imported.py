"""A plugin module that a test installs but does not name: importing it is the failure."""

from tests.support.plugins import echo

definition = echo
