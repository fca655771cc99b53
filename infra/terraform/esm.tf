# likes-aggregator's event source mapping and the like-events stream, from the one definition the
# CDK app and the Rust code (heatsink_photo_app::esm, `heatsink-demo`, `heatsink plan --esm`) read:
# infra/esm.json. Consume the module from the repository (a git source keeps infra/ together); a
# copy of this directory alone needs esm.json next to it at ../esm.json.
locals {
  esm = jsondecode(file("${path.module}/../esm.json"))
}
