"""FedSampling on Flower: the ServerApp and ClientApp are fedsample's, configured by the run config."""
