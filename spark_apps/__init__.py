"""The example pipeline's stages as PySpark applications (see docs/spark.md)."""
