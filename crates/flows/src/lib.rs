//! microflow cache and aggregator: flow records from packets (TurboFlow), and the cache's capacity model
