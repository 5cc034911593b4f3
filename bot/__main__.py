"""``python -m bot`` runs the chorus CLI (same as the ``chorus`` command)."""
import sys

from bot.cli import main

sys.exit(main())
