//! heatsink's integration tests against the local AWS stack live in `tests/it/` (one binary,
//! one module per area); their harness is the internal test kit, `heatsink-testkit`.

use heatsink::schema::TableSpec;
use heatsink_photo_app::schema::{Schema, Table};
use heatsink_testkit::Fixture;

/// The photo app's tables on a test kit [`Fixture`] (the kit knows no application's tables).
pub trait PhotoFixture {
    /// The photo app's schema under the fixture's prefix.
    fn photo(&self) -> Schema;
    /// Creates the photo app's `table` under the fixture's prefix (deleted with the fixture).
    fn photo_table(&self, table: Table) -> impl std::future::Future<Output = TableSpec>;
}

impl PhotoFixture for Fixture {
    fn photo(&self) -> Schema {
        Schema::new(self.prefix())
    }

    async fn photo_table(&self, table: Table) -> TableSpec {
        self.table(self.photo().table(table)).await
    }
}
