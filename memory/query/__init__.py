"""The query pipeline: project -> Track 1 -> Track 2 rows -> compose -> answer."""
