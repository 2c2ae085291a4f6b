"""ClientApp: fedsample's client procedures on the node's own partition (node config ``partition-id``)."""

from fedsample.flower import client_app

from fedsample_example.task import dataset_settings, injected_faults

app = client_app(dataset_settings(), mods=[injected_faults])
