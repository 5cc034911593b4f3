"""The platform-neutral Chorus bot: configuration, message handling, commands, scheduler, CLI."""
