"""What operators watch: Prometheus metrics, scrape configs and the Grafana dashboards."""
