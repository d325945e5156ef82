"""What leaves the machine: a release published to the Hugging Face Hub (and the record of each publish
beside the release), and our graded records exported as FlashInfer-Bench traces."""
