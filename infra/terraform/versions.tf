terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 6.11: the Contributor Insights mode of modules/hot-key-guard.
      version = ">= 6.11"
    }
  }
}
