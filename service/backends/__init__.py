"""service.backends"""
