"""ServerApp: FedSampling (or any recipe named in the run config) over the connected SuperNodes."""

from fedsample.flower import server_app

from fedsample_example.task import dataset_settings

app = server_app(dataset_settings())
