"""service.evaluation"""
