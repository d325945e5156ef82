"""What a person reads: the pictures, the dataset card (template and column descriptions), the revalidation,
claim-audit and cost reports, a record's lineage, and the sections of `kerneltraj status`."""
